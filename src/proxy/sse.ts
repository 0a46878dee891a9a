/**
 * A backend's server-sent events as the proxy reads them: chunks cut anywhere (inside an
 * event, a line or a UTF-8 character) in, the `data:` payloads of whole events out. The
 * decode relay reads a stream it splices through `sseData`; the multi-turn tap
 * (conversation-cache.ts) reads one passed through byte for byte with its own splitter.
 * Either way each chunk is split once. Written here because no SSE parser is among the
 * dependencies and every event of a streamed answer passes through it.
 */

export class SseSplitter {
  readonly #decoder = new TextDecoder();
  /** The start of an event whose end has not arrived. */
  #held = '';

  /**
   * The data payloads of the events this chunk completes, in order: an event's `data:`
   * lines (one space after the colon dropped) joined by "\n"; an event without data gives
   * none. The rest is held for the next chunk.
   */
  push(chunk: Uint8Array): string[] {
    // An event ends at a blank line: LF or CRLF, then LF or CRLF. Its first LF may be one
    // of the last two characters held; nothing before them can start one that was not seen.
    let lf = Math.max(0, this.#held.length - 2);
    const text = this.#held + this.#decoder.decode(chunk, { stream: true });
    const payloads: string[] = [];
    let start = 0;
    for (lf = text.indexOf('\n', lf); lf >= 0; lf = text.indexOf('\n', lf + 1)) {
      const next = text.charCodeAt(lf + 1);
      const blank = next === LF ? 2 : next === CR && text.charCodeAt(lf + 2) === LF ? 3 : 0;
      if (blank === 0) continue;
      const end = lf > start && text.charCodeAt(lf - 1) === CR ? lf - 1 : lf;
      const data = dataOf(text.slice(start, end));
      if (data !== '') payloads.push(data);
      start = lf + blank;
      lf = start - 1;
    }
    this.#held = text.slice(start);
    return payloads;
  }
}

const LF = 10;
const CR = 13;

function dataOf(event: string): string {
  // Most events are one line.
  if (!event.includes('\n'))
    return event.startsWith('data:') ? event.slice(event.startsWith('data: ') ? 6 : 5) : '';
  return event
    .split(/\r?\n/)
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5))
    .join('\n');
}

/** Splits an SSE body into the payloads of its `data:` lines, one per event. */
export async function* sseData(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const events = new SseSplitter();
  for await (const chunk of body) yield* events.push(chunk);
}
