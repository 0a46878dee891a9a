/** A tiny exact-path router: method + path → handler, with 404 / 405 in OpenAI's error shape. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError } from './http-errors.ts';

export type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export class Router {
  readonly #routes = new Map<string, Map<string, Handler>>();

  on(method: string, path: string, handler: Handler): this {
    let byMethod = this.#routes.get(path);
    if (!byMethod) {
      byMethod = new Map();
      this.#routes.set(path, byMethod);
    }
    byMethod.set(method, handler);
    return this;
  }

  /** The handler for the request, or throws a 404/405 HttpError. */
  resolve(method: string, url: string): Handler {
    const path = url.split('?', 1)[0] ?? '/';
    const byMethod = this.#routes.get(path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path);
    if (!byMethod) {
      throw new HttpError(404, 'SERVER_ROUTE_NOT_FOUND', `Not Found: ${method} ${path}`, {
        hint: `Known routes: ${[...this.#routes.keys()].join(', ')}.`,
      });
    }
    const handler = byMethod.get(method) ?? (method === 'HEAD' ? byMethod.get('GET') : undefined);
    if (!handler) {
      throw new HttpError(405, 'SERVER_METHOD_NOT_ALLOWED', `Method Not Allowed: ${method} ${path}`, {
        hint: `Use ${[...byMethod.keys()].join(' or ')}.`,
      });
    }
    return handler;
  }
}
