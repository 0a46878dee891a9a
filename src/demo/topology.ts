/**
 * The servers the demo starts: a prefill server (kv_producer), a decode server
 * (kv_consumer) and a plain reference server, as `kvconnect serve` command lines.
 */

import { randomUUID } from 'node:crypto';
import { resolveModelInfo } from '../config/model-info.ts';
import type { PushCoordinates } from '../proxy/types.ts';
import type { MoRIIOTransferMode, PdConnector } from '../wire/index.ts';
import { type DemoConnector, type DemoOptions, demoFlow } from './options.ts';
import {
  freeMoriioPorts,
  freePorts,
  type MoriioPorts,
  moriioEngineId,
  moriioTransferConfig,
  nixlTransferConfig,
} from './transfer-configs.ts';

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
  /** The P/D flow the proxy runs. */
  proxyFlow: PdConnector;
  /** MoRIIO only: the mode the proxy is told to run (the servers run the same). */
  moriioMode?: MoRIIOTransferMode;
}

/** A port that was free a moment ago (the push proxy must know P's side channel up front). */
export async function freePort(): Promise<number> {
  const [port = 0] = await freePorts(1);
  return port;
}

function serveArgs(options: DemoOptions, port: number, transferConfig?: Record<string, unknown>): string[] {
  const args = ['--model', options.model, '--port', String(port)];
  return transferConfig ? [...args, '--kv-transfer-config', JSON.stringify(transferConfig)] : args;
}

export async function planTopology(connector: DemoConnector, options: DemoOptions): Promise<DemoTopology> {
  const flow = demoFlow(connector);
  if (flow === 'MoRIIOConnector') return planMoriio(options);
  const suffix = randomUUID().slice(0, 8);
  const prefillEngineId = `demo-prefill-${suffix}`;
  const decodeEngineId = `demo-decode-${suffix}`;
  // Pull flows learn P's side channel from P's answer; push needs it before P answers.
  const push = flow === 'NixlPushConnector';
  const prefillSideChannel = push ? await freePort() : 0;
  return {
    prefillArgs: serveArgs(
      options,
      0,
      nixlTransferConfig(connector, 'kv_producer', prefillEngineId, prefillSideChannel, options),
    ),
    decodeArgs: serveArgs(
      options,
      0,
      nixlTransferConfig(connector, 'kv_consumer', decodeEngineId, 0, options),
    ),
    referenceArgs: serveArgs(options, 0),
    push: push
      ? { engineId: prefillEngineId, host: '127.0.0.1', port: prefillSideChannel, tpSize: 1, ppSize: 1 }
      : {},
    prefillEngineId,
    decodeEngineId,
    proxyFlow: flow,
  };
}

/**
 * MoRIIO advertises its own HTTP port (http_port must be the port the server listens on)
 * and listens on fixed handshake/notify ports, so every port is chosen before the start.
 * The proxy reads each server's zmq address from GET /kvconnect/info.
 */
async function planMoriio(options: DemoOptions): Promise<DemoTopology> {
  const [prefill, decode] = (await freeMoriioPorts(2)) as [MoriioPorts, MoriioPorts];
  return {
    prefillArgs: serveArgs(options, prefill.http, moriioTransferConfig('kv_producer', prefill, options)),
    decodeArgs: serveArgs(options, decode.http, moriioTransferConfig('kv_consumer', decode, options)),
    referenceArgs: serveArgs(options, 0),
    push: {},
    prefillEngineId: moriioEngineId(prefill),
    decodeEngineId: moriioEngineId(decode),
    proxyFlow: 'MoRIIOConnector',
    moriioMode: options.moriioReadMode ? 'READ' : 'WRITE',
  };
}

/** Bytes of one KV block across all layers (K and V), with the engine's default geometry. */
export function kvBytesPerBlock(model: string): number {
  const hf = resolveModelInfo(model).hfConfig;
  const headDim = hf.head_dim ?? hf.hidden_size / hf.num_attention_heads;
  return hf.num_hidden_layers * 2 * BLOCK_SIZE * hf.num_key_value_heads * headDim * CACHE_DTYPE_BYTES;
}
