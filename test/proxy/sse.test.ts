import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SseSplitter, sseData } from '../../src/proxy/sse.ts';

const bytes = (s: string) => new TextEncoder().encode(s);

describe('SSE splitter (the proxy reads each chunk of a stream once)', () => {
  it('gives each event once whole, however the chunks cut it', () => {
    const stream =
      'data: {"text":"héllo"}\n\n' + // a 2-byte character
      'event: x\r\ndata:a\r\ndata: b\r\n\r\n' + // CRLF, two data lines, no space after a colon
      ': a comment\n\n' + // no data: no payload
      'data: [DONE]\n\n';
    const want = ['{"text":"héllo"}', 'a\nb', '[DONE]'];
    const all = bytes(stream);
    // Every cut in two, so every boundary, CRLF pair and the character's two bytes are split.
    for (let cut = 0; cut <= all.length; cut++) {
      const s = new SseSplitter();
      const got = [...s.push(all.subarray(0, cut)), ...s.push(all.subarray(cut))];
      assert.deepEqual(got, want, `cut at byte ${cut}`);
    }
    const s = new SseSplitter();
    const oneByOne = [...all].flatMap((b) => s.push(Uint8Array.of(b)));
    assert.deepEqual(oneByOne, want, 'one byte per chunk');
  });

  it('holds an event until its blank line arrives', () => {
    const s = new SseSplitter();
    assert.deepEqual(s.push(bytes('data: 1\n\ndata: 2\n')), ['1']);
    assert.deepEqual(s.push(bytes('\n')), ['2']);
    assert.deepEqual(s.push(bytes('data: 3')), []);
  });

  it('sseData reads a body of chunks', async () => {
    async function* body() {
      yield bytes('data: x\n');
      yield bytes('\ndata: y\n\n');
    }
    const got: string[] = [];
    for await (const d of sseData(body())) got.push(d);
    assert.deepEqual(got, ['x', 'y']);
  });
});
