/**
 * Shared setup of the server tests: a real AsyncEngine (tiny model) behind a real server on
 * 127.0.0.1 port 0.
 */
import { after, before } from 'node:test';
import { buildEngineConfig, type EngineOptionsInput } from '../../../src/config/engine-config.ts';
import type { AsyncEngineLike } from '../../../src/engine/api.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { setLogLevel } from '../../../src/logging/logger.ts';
import { createServer, type KVServer, type ServerOptions } from '../../../src/server/server.ts';

export async function startEngine(options: EngineOptionsInput = {}): Promise<AsyncEngineLike> {
  setLogLevel('error');
  return AsyncEngine.create(buildEngineConfig({ model: 'tiny', max_model_len: 256, ...options }));
}

export interface Running {
  server: KVServer;
  url: string;
  close(): Promise<void>;
}

export async function startServer(options: ServerOptions): Promise<Running> {
  const server = createServer(options);
  const { url } = await server.start('127.0.0.1', 0);
  return { server, url, close: () => server.close() };
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** The value of the first sample of `name` whose line contains every `filter` substring. */
export function metricValue(text: string, name: string, ...filter: string[]): number {
  const line = text
    .split('\n')
    .find(
      (l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && filter.every((f) => l.includes(f)),
    );
  if (!line) throw new Error(`metric ${name} not found`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

export async function waitFor(
  check: () => Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * A tiny engine behind a real server for the tests of one file: started before them,
 * closed after them. Read `engine` and `url` inside the tests.
 */
export function servedForTests(options: Omit<ServerOptions, 'engine'> = {}): {
  readonly engine: AsyncEngineLike;
  readonly url: string;
} {
  let engine: AsyncEngineLike | undefined;
  let running: Running | undefined;
  before(async () => {
    engine = await startEngine();
    running = await startServer({ engine, ...options });
  });
  after(async () => {
    await running?.close();
    await engine?.shutdown();
  });
  return {
    get engine() {
      if (!engine) throw new Error('the server starts in before()');
      return engine;
    },
    get url() {
      if (!running) throw new Error('the server starts in before()');
      return running.url;
    },
  };
}
