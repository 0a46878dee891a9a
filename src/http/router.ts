/** An exact-path router: method + path → handler, with 404 / 405 errors under the caller's codes. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type ErrorCode, KVError } from '../errors/index.ts';
import { sendError } from './reply.ts';

export type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export interface RouterCodes {
  notFound: ErrorCode;
  methodNotAllowed: ErrorCode;
}

export class Router {
  readonly #routes = new Map<string, Map<string, Handler>>();
  readonly #codes: RouterCodes;

  constructor(codes: RouterCodes) {
    this.#codes = codes;
  }

  on(method: string, path: string, handler: Handler): this {
    let byMethod = this.#routes.get(path);
    if (!byMethod) {
      byMethod = new Map();
      this.#routes.set(path, byMethod);
    }
    byMethod.set(method, handler);
    return this;
  }

  /** The registered path a request URL matches (trailing slash ignored), or null. */
  routeOf(url: string): string | null {
    const key = routeKey(pathOf(url));
    return this.#routes.has(key) ? key : null;
  }

  /** The handler for the request (GET's for HEAD), or throws the 404/405 error. */
  resolve(method: string, url: string): Handler {
    const path = pathOf(url);
    const byMethod = this.#routes.get(routeKey(path));
    if (!byMethod) {
      throw new KVError(this.#codes.notFound, `Not Found: ${method} ${path}`, {
        hint: `Known routes: ${this.describe()}.`,
      });
    }
    const handler = byMethod.get(method) ?? (method === 'HEAD' ? byMethod.get('GET') : undefined);
    if (!handler) {
      throw new KVError(this.#codes.methodNotAllowed, `Method Not Allowed: ${method} ${path}`, {
        hint: `Use ${[...byMethod.keys()].join(' or ')}.`,
      });
    }
    return handler;
  }

  /**
   * The request listener: resolve, run `guard` (which may throw, e.g. a 401) then the handler;
   * any error becomes the error reply, after `onError` saw it.
   */
  listener(
    options: {
      guard?: (req: IncomingMessage) => void;
      onError?: (e: unknown, req: IncomingMessage) => void;
    } = {},
  ): (req: IncomingMessage, res: ServerResponse) => void {
    const run = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
      try {
        const handler = this.resolve(req.method ?? 'GET', req.url ?? '/');
        options.guard?.(req);
        await handler(req, res);
      } catch (e) {
        options.onError?.(e, req);
        sendError(res, e);
      }
    };
    return (req, res) => {
      void run(req, res);
    };
  }

  /** "POST /v1/completions, GET /health, ..." for hints. */
  describe(): string {
    return [...this.#routes]
      .flatMap(([path, byMethod]) => [...byMethod.keys()].map((m) => `${m} ${path}`))
      .join(', ');
  }
}

export function pathOf(url: string): string {
  return url.split('?', 1)[0] || '/';
}

/** The key a path's route is registered under: the path without a trailing slash ("/" stays). */
function routeKey(path: string): string {
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}
