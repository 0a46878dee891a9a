/** Server-sent events in OpenAI's framing (`data: {json}\n\n`, ending with `data: [DONE]`). */
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

  async done(): Promise<void> {
    await writeChunk(this.#res, 'data: [DONE]\n\n');
    this.#res.end();
  }
}
