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

/** POSTs `body` as JSON (none when undefined): the status and the parsed answer ({} when empty). */
export async function postForJson(
  url: string,
  body?: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

/** A plain engine and a NixlConnector prefill/decode pair over TCP, each behind its own server. */
export async function servePdTrio(): Promise<{ plain: Served; prefill: Served; decode: Served }> {
  const nixl = (role: string) => ({
    kv_connector: 'NixlConnector',
    kv_role: role,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  });
  const plain = await serve({ num_gpu_blocks: 64 });
  const prefill = await serve({ num_gpu_blocks: 64, kv_transfer_config: nixl('kv_producer') });
  const decode = await serve({ num_gpu_blocks: 64, kv_transfer_config: nixl('kv_consumer') });
  return { plain, prefill, decode };
}
