/**
 * The MoRIIO handshake (docs/connectors/moriio.md#ports): what each worker's handshake
 * listener serves, and the checks a worker makes on a peer's payload before it adds the
 * peer's transfer agent.
 */
import { KVError } from '../../errors/kv-error.ts';
import type { AgentMetadata } from '../../transfer/index.ts';
import type { MoRIIOBackend } from './config.ts';

/** What a worker's handshake listener serves. */
export interface MoRIIOAgentPayload {
  readonly engine_id: string;
  readonly tp_rank: number;
  readonly tp_size: number;
  readonly total_kv_heads: number;
  readonly block_size: number;
  readonly block_lens: readonly number[];
  readonly agent: AgentMetadata;
}

/**
 * The peer's payload, checked against this worker's: a handshake listener's answer, the same
 * KV block geometry, and for backend 'xgmi' the same host. Throws a KVError naming the fix.
 */
export function checkPeerPayload(
  metadata: unknown,
  local: MoRIIOAgentPayload,
  backend: MoRIIOBackend,
  where: { readonly host: string; readonly port: number },
): MoRIIOAgentPayload {
  const remote = metadata as MoRIIOAgentPayload | undefined;
  if (!remote || typeof remote !== 'object' || typeof remote.agent !== 'object') {
    throw new KVError(
      'MORIIO_HANDSHAKE_FAILED',
      `handshake failed, unexpected msg type from ${where.host}:${where.port}`,
      {
        hint: 'The port answered but is not a MoRIIO handshake listener; check handshake_port and the per-worker offset.',
      },
    );
  }
  const same =
    remote.block_size === local.block_size &&
    remote.block_lens.length === local.block_lens.length &&
    remote.block_lens.every((n, i) => n === local.block_lens[i]);
  if (!same) {
    throw new KVError(
      'MORIIO_GEOMETRY_MISMATCH',
      `MoRIIO peer ${remote.engine_id} has KV blocks of [${remote.block_lens.join(', ')}] bytes (block size ${remote.block_size}), this engine [${local.block_lens.join(', ')}] (block size ${local.block_size})`,
      { hint: 'Use the same model, block size and cache dtype on prefill and decode.' },
    );
  }
  if (backend === 'xgmi' && remote.agent.endpoints.shm?.hostId !== local.agent.endpoints.shm?.hostId) {
    throw new KVError(
      'MORIIO_XGMI_REMOTE_HOST',
      `MoRIIO backend 'xgmi' reaches only peers on the same host, but ${remote.engine_id} (${where.host}) is on another host (or uses backend 'rdma')`,
      {
        field: 'kv_connector_extra_config.backend',
        hint: 'Set "backend": "rdma" on both engines for prefill and decode on different hosts (kvconnect maps it to the tcp transport).',
      },
    );
  }
  return remote;
}
