/**
 * The decode leg's stream reaches the client with its headers in the same write as its first
 * event (one batch of corked socket writes, so the client reads both at once), whether the
 * stream is resumable (its events parsed) or passed through byte for byte; a stream whose
 * first relay has no event still gets its headers at once.
 */
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { request } from 'undici';
import { ClientOut } from '../../src/proxy/decode-relay.ts';
import {
  decodeResponder,
  prefillResponder,
  sleep,
  UpstreamDouble,
  withProxy,
} from './helpers/upstream-double.ts';

interface SocketWrite {
  text: string;
  corked: boolean;
}

/** Records every write on the response's socket, and whether the socket was corked then. */
function spyWrites(res: ServerResponse): SocketWrite[] {
  const writes: SocketWrite[] = [];
  const socket = res.socket;
  assert.ok(socket, 'the response has its socket');
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
  socket.write = ((...args: unknown[]) => {
    writes.push({ text: String(args[0]), corked: socket.writableCorked > 0 });
    return write(...args);
  }) as typeof socket.write;
  return writes;
}

/** A server whose one response is written by `respond`; returns what its socket wrote. */
async function serveOnce(
  respond: (res: ServerResponse) => Promise<void>,
): Promise<{ writes: SocketWrite[]; body: string }> {
  let writes: SocketWrite[] = [];
  const server = createServer((_req, res) => {
    writes = spyWrites(res);
    void respond(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  try {
    const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    return { writes, body: await res.body.text() };
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

/** The socket writes from the status line to the first event, which must all be one corked batch. */
function headersWithFirstEvent(writes: readonly SocketWrite[], event: string): void {
  const status = writes.findIndex((w) => w.text.startsWith('HTTP/1.1 200'));
  const first = writes.findIndex((w) => w.text.includes(event));
  assert.ok(status >= 0 && first >= status, `status line then the event: ${JSON.stringify(writes)}`);
  for (const w of writes.slice(status, first + 1)) {
    assert.ok(w.corked, `written on its own, not with the first event: ${JSON.stringify(w.text)}`);
  }
}

test('ClientOut writes the stream headers with the first event', async () => {
  const event = 'data: {"choices":[{"text":"a"}]}\n\n';
  const { writes, body } = await serveOnce(async (res) => {
    const out = new ClientOut(res, 'rid');
    await out.events([event]);
    await sleep(20);
    await out.events(['data: [DONE]\n\n']);
    out.end();
  });
  headersWithFirstEvent(writes, event);
  assert.equal(body, `${event}data: [DONE]\n\n`);
});

test('ClientOut flushes the headers at once when its first relay has no event', async () => {
  const { writes } = await serveOnce(async (res) => {
    const out = new ClientOut(res, 'rid');
    await out.events([]);
    await sleep(20);
    out.end();
  });
  const status = writes.find((w) => w.text.startsWith('HTTP/1.1 200'));
  assert.ok(status, 'the headers were written');
  assert.match(status.text, /content-type: text\/event-stream/i);
  assert.match(status.text, /x-request-id: rid/i);
});

for (const streamResume of [true, false]) {
  test(`through the proxy (stream resume ${streamResume ? 'on' : 'off'}): the client gets the stream whole`, async () => {
    const p = await UpstreamDouble.start(prefillResponder());
    const d = await UpstreamDouble.start(decodeResponder(3, 10));
    await withProxy([p], [d], { kvConnector: 'NixlConnector', streamResume }, async (url) => {
      const res = await request(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': 'relay-1' },
        body: JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: 3, stream: true }),
      });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/event-stream/);
      assert.equal(res.headers['x-request-id'], 'relay-1');
      const text = await res.body.text();
      const texts = text
        .split('\n\n')
        .filter((e) => e.startsWith('data: {'))
        .map((e) => (JSON.parse(e.slice(6)) as { choices: Array<{ text: string }> }).choices[0]?.text);
      assert.deepEqual(texts, ['tok0', 'tok1', 'tok2']);
      assert.ok(text.endsWith('data: [DONE]\n\n'));
    });
  });
}
