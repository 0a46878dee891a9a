/** A real AsyncEngine (tiny by default) behind a real server on 127.0.0.1, port 0. */
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { createServer, type KVServer, type ServerOptions } from '../../../src/server/index.ts';

export interface Served {
  engine: AsyncEngine;
  server: KVServer;
  url: string;
}

export async function serve(
  engineOptions: Record<string, unknown> = {},
  serverOptions: Omit<ServerOptions, 'engine'> = {},
): Promise<Served> {
  const engine = await AsyncEngine.create({ model: 'tiny', max_model_len: 256, ...engineOptions });
  const server = createServer({ engine, ...serverOptions });
  const { url } = await server.start('127.0.0.1', 0);
  return { engine, server, url };
}

/** Closes the servers, then shuts their engines down. */
export async function stop(...served: Served[]): Promise<void> {
  for (const s of served) {
    await s.server.close();
    await s.engine.shutdown();
  }
}
