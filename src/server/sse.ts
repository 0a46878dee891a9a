/**
 * Server-sent events in OpenAI's framing: `data: {json}\n\n` ending with `data: [DONE]`, or
 * (the Responses API) named events `event: {type}\ndata: {json}\n\n` ending with the stream.
 */
import type { ServerResponse } from 'node:http';
import { writeChunk } from '../http/index.ts';

export class SseWriter {
  readonly #res: ServerResponse;

  constructor(res: ServerResponse, headers: Record<string, string>) {
    this.#res = res;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      ...headers,
    });
    res.flushHeaders();
  }

  get closed(): boolean {
    return this.#res.destroyed || this.#res.writableEnded;
  }

  /** Writes one event; resolves when the socket can take more (back-pressure). */
  async send(value: unknown): Promise<void> {
    await writeChunk(this.#res, `data: ${JSON.stringify(value)}\n\n`);
  }

  /** A named event (`event: <name>` before its data), as the Responses API streams. */
  async sendEvent(name: string, value: unknown): Promise<void> {
    await writeChunk(this.#res, `event: ${name}\ndata: ${JSON.stringify(value)}\n\n`);
  }

  /** Ends the stream without the `[DONE]` marker. */
  end(): void {
    this.#res.end();
  }

  async done(): Promise<void> {
    await writeChunk(this.#res, 'data: [DONE]\n\n');
    this.#res.end();
  }
}
