/**
 * Reading the remote_* keys of kv_transfer_params
 * (docs/connectors/nixl.md#how-a-request-flows-pull) without trusting their types.
 */
import type { KVTransferParams } from '../../connector/types.ts';
import type { RemoteEndpoint } from './step-metadata.ts';

export function parseRemote(p: KVTransferParams): RemoteEndpoint | null {
  const engineId = p['remote_engine_id'];
  const host = p['remote_host'];
  const port = Number(p['remote_port']);
  const tp = p['tp_size'] === undefined || p['tp_size'] === null ? 1 : Number(p['tp_size']);
  if (typeof engineId !== 'string' || engineId === '' || typeof host !== 'string' || host === '') return null;
  if (!Number.isInteger(port) || port <= 0 || port > 65535 || !Number.isInteger(tp) || tp < 1) return null;
  return { engineId, host, port, tpSize: tp };
}

export function remoteNumTokens(p: KVTransferParams): number | null {
  const n = p['remote_num_tokens'];
  return typeof n === 'number' && Number.isInteger(n) && n > 0 ? n : null;
}
