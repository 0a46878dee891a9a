/**
 * MoRIIO's notify channel sender (docs/connectors/moriio.md#modes): one connection per peer
 * listener stays open, so messages leave at once and in order; a connection the peer closed
 * is replaced at the next message; an unreachable peer fails with MORIIO_NOTIFY_FAILED.
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import {
  type NotifyMessage,
  NotifyServer,
  sendNotify,
} from '../../../src/connectors/moriio/notify-channel.ts';
import { waitUntil } from '../../helpers/wait-until.ts';

const done = (id: string): NotifyMessage => ({ type: 'write_done', transfer_id: id, tp_rank: 0 });

/** A listener that counts its connections and keeps each line it receives. */
async function countingListener(): Promise<{
  server: Server;
  port: number;
  sockets: Socket[];
  lines: string[];
}> {
  const sockets: Socket[] = [];
  const lines: string[] = [];
  const server = createServer((s) => {
    sockets.push(s);
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        lines.push(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  assert.ok(typeof addr === 'object' && addr !== null);
  return { server, port: addr.port, sockets, lines };
}

describe('MoRIIO notify channel sender', () => {
  it('keeps one connection per listener: messages arrive in order over it', async () => {
    const { server, port, sockets, lines } = await countingListener();
    try {
      for (let i = 0; i < 5; i++) await sendNotify('127.0.0.1', port, done(`tx-${i}`));
      await waitUntil('five messages', () => lines.length === 5);
      assert.deepEqual(
        lines.map((l) => (JSON.parse(l) as NotifyMessage).transfer_id),
        ['tx-0', 'tx-1', 'tx-2', 'tx-3', 'tx-4'],
      );
      assert.equal(sockets.length, 1, 'one connection for all five');
      // The peer closes it (restarted, or shut its listener): the next message opens a new one.
      sockets[0]!.destroy();
      await waitUntil('the next message over a new connection', async () => {
        await sendNotify('127.0.0.1', port, done('tx-5')).catch(() => {});
        return lines.some((l) => l.includes('tx-5'));
      });
      assert.equal(sockets.length, 2);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    }
  });

  it('reaches a NotifyServer; an unreachable peer fails with MORIIO_NOTIFY_FAILED', async () => {
    const received: NotifyMessage[] = [];
    const peer = new NotifyServer((m) => received.push(m));
    const port = await peer.listen('127.0.0.1', 0, 'notify_port');
    await sendNotify('127.0.0.1', port, done('tx-a'));
    await waitUntil('the message', () => received.length === 1);
    assert.deepEqual(received, [done('tx-a')]);
    await peer.close();
    await assert.rejects(
      waitUntil('the closed peer refuses', async () => {
        await sendNotify('127.0.0.1', port, done('tx-b'));
        return false;
      }),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, 'MORIIO_NOTIFY_FAILED');
        assert.match(e.message, /^MoRIIO notify write_done to 127\.0\.0\.1:\d+ failed: /);
        return true;
      },
    );
  });
});
