/**
 * The servers the demo starts: a prefill server (kv_producer), a decode server
 * (kv_consumer) and a plain reference server, as `kvconnect serve` command lines.
 */

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { resolveModelInfo } from '../config/model-info.ts';
import type { PushCoordinates } from '../proxy/types.ts';
import type { DemoConnector, DemoOptions } from './options.ts';

/** The engine's defaults the demo relies on to turn bytes into blocks. */
const BLOCK_SIZE = 16;
const CACHE_DTYPE_BYTES = 4;

export interface DemoTopology {
  prefillArgs: string[];
  decodeArgs: string[];
  referenceArgs: string[];
  /** What the proxy needs to know about P for the push flow. */
  push: PushCoordinates;
  prefillEngineId: string;
  decodeEngineId: string;
}

/** A port that was free a moment ago (the push proxy must know P's side channel up front). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

function transferConfig(
  connector: DemoConnector,
  role: 'kv_producer' | 'kv_consumer',
  engineId: string,
  sideChannelPort: number,
  options: DemoOptions,
): string {
  return JSON.stringify({
    kv_connector: connector,
    kv_role: role,
    engine_id: engineId,
    kv_load_failure_policy: options.kvLoadFailurePolicy,
    kv_connector_extra_config: {
      side_channel_port: sideChannelPort,
      kv_lease_duration: options.kvLeaseDuration,
    },
  });
}

export async function planTopology(connector: DemoConnector, options: DemoOptions): Promise<DemoTopology> {
  const suffix = randomUUID().slice(0, 8);
  const prefillEngineId = `demo-prefill-${suffix}`;
  const decodeEngineId = `demo-decode-${suffix}`;
  // Pull flows learn P's side channel from P's answer; push needs it before P answers.
  const prefillSideChannel = connector === 'NixlPushConnector' ? await freePort() : 0;
  const common = ['--model', options.model, '--port', '0'];
  return {
    prefillArgs: [
      ...common,
      '--kv-transfer-config',
      transferConfig(connector, 'kv_producer', prefillEngineId, prefillSideChannel, options),
    ],
    decodeArgs: [
      ...common,
      '--kv-transfer-config',
      transferConfig(connector, 'kv_consumer', decodeEngineId, 0, options),
    ],
    referenceArgs: common,
    push:
      connector === 'NixlPushConnector'
        ? { engineId: prefillEngineId, host: '127.0.0.1', port: prefillSideChannel, tpSize: 1, ppSize: 1 }
        : {},
    prefillEngineId,
    decodeEngineId,
  };
}

/** Bytes of one KV block across all layers (K and V), with the engine's default geometry. */
export function kvBytesPerBlock(model: string): number {
  const hf = resolveModelInfo(model).hfConfig;
  const headDim = hf.head_dim ?? hf.hidden_size / hf.num_attention_heads;
  return hf.num_hidden_layers * 2 * BLOCK_SIZE * hf.num_key_value_heads * headDim * CACHE_DTYPE_BYTES;
}
