/**
 * Shared setup of the server tests: a real AsyncEngine (tiny model) behind a real server on
 * 127.0.0.1 port 0. Tests that need the engine are skipped with a clear reason while
 * src/engine/async-engine.ts does not exist yet.
 */
import { existsSync } from 'node:fs';
import { buildEngineConfig, type EngineOptionsInput } from '../../src/config/engine-config.ts';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { createServer, type KVServer, type ServerOptions } from '../../src/server/server.ts';

const ENGINE_FILE = new URL('../../src/engine/async-engine.ts', import.meta.url);

/** A reason to skip, or false when the AsyncEngine is available. */
export const engineMissing: string | false = existsSync(ENGINE_FILE)
  ? false
  : 'waiting for src/engine/async-engine.ts (the AsyncEngine) to land';

export async function startEngine(options: EngineOptionsInput = {}): Promise<AsyncEngineLike> {
  setLogLevel('error');
  const mod = (await import(ENGINE_FILE.href)) as {
    AsyncEngine: { create(config: ReturnType<typeof buildEngineConfig>): Promise<AsyncEngineLike> };
  };
  return mod.AsyncEngine.create(buildEngineConfig({ model: 'tiny', max_model_len: 256, ...options }));
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
