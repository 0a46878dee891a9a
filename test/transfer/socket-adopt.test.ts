import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { adoptAcceptedSocket } from '../../src/transfer/connection.ts';

/** Accepts one connection, adopts it with `onread` into `target`, and sends `payload` from the client. */
async function adoptAndSend(payload: Buffer, target: Uint8Array) {
  const reads: { n: number; intoTarget: boolean }[] = [];
  let adopted: Socket | undefined;
  let accepted: Socket | undefined;
  let filled = 0;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => {
    resolveDone = r;
  });
  const server = createServer({ pauseOnConnect: true }, (s) => {
    accepted = s;
    adopted = adoptAcceptedSocket(s, {
      buffer: () => target.subarray(filled),
      callback: (n, buf) => {
        reads.push({ n, intoTarget: buf.buffer === target.buffer });
        filled += n;
        if (filled === payload.length) resolveDone();
        return true;
      },
    });
    adopted.write('hello');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const client = connect(port, '127.0.0.1');
  const greeting = new Promise<string>((r) => client.once('data', (b) => r(b.toString())));
  client.write(payload);
  // Bounded: if adoption did not happen, no read ever lands in `target`.
  const timer = setTimeout(resolveDone, 5000);
  await done;
  clearTimeout(timer);
  const hello = await Promise.race([greeting, new Promise<string>((r) => setTimeout(() => r(''), 1000))]);
  client.destroy();
  adopted?.destroy();
  await new Promise<void>((r) => server.close(() => r()));
  return { reads, hello, adoptedIsNew: adopted !== accepted };
}

function filledBytes(reads: readonly { n: number }[]): number {
  return reads.reduce((s, r) => s + r.n, 0);
}

describe('adopting accepted sockets for in-place reads', () => {
  it('reads an accepted connection straight into the caller-chosen buffer, and still writes', async () => {
    const payload = Buffer.alloc(3 << 20);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 31) & 0xff;
    const target = new Uint8Array(new SharedArrayBuffer(payload.length));
    const { reads, hello, adoptedIsNew } = await adoptAndSend(payload, target);
    assert.equal(adoptedIsNew, true, 'the accepted socket was not adopted (Node internals changed?)');
    assert.equal(filledBytes(reads), payload.length);
    assert.equal(hello, 'hello');
    assert.ok(reads.length > 0 && reads.every((r) => r.intoTarget));
    assert.ok(Buffer.from(target).equals(payload));
  });
});
