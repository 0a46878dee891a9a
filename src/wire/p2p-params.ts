/**
 * The OffloadingConnector p2p tier's orchestration keys in `kv_transfer_params`
 * (docs/connectors/offloading.md#orchestration-protocol), as vLLM defines them. Each key names
 * the remote counterpart of the request:
 * - `remote_decoder: {kv_request_id}` on a prefill (producer) request: keep the computed KV for
 *   the decoder that will fetch it under this id;
 * - `remote_prefiller: {kv_request_id, remote_host, remote_port}` on a decode (consumer)
 *   request: pull the KV from that prefiller (classic P/D, no lookup round trip);
 * - `remote_kv_source: {kv_request_id, remote_host, remote_port}` on a consumer request: ask
 *   that peer which prefix blocks it holds, then pull those.
 * `remote_decoder` + `remote_kv_source` is the only allowed pair; every other combination of
 * two or more is refused.
 */
/** kv_transfer_params as JSON (kv-transfer-params.ts imports this file). */
type KVTransferParams = Record<string, unknown>;

export const P2P_ROLE_KEYS = ['remote_decoder', 'remote_prefiller', 'remote_kv_source'] as const;
export type P2PRoleKey = (typeof P2P_ROLE_KEYS)[number];

/** Where a consumer pulls from: the peer's p2p control socket and the transaction id. */
export interface P2PSource {
  readonly kvRequestId: string;
  readonly host: string;
  readonly port: number;
}

/** The p2p roles of one request (each null when absent). */
export interface P2PRoles {
  /** Producer: the id a remote decoder fetches this request's KV under. */
  readonly decoder: { readonly kvRequestId: string } | null;
  /** Consumer, P/D: the prefiller holds every block of the prompt. */
  readonly prefiller: P2PSource | null;
  /** Consumer, peer pull: ask the source which blocks it holds. */
  readonly kvSource: P2PSource | null;
}

/** A refused p2p value: which field, what was expected and received, and how to fix it. */
export interface P2PParamError {
  readonly key: string;
  readonly expected: string;
  readonly received: unknown;
  readonly hint: string;
}

const isPort = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v > 0 && v <= 65535;

function sourceError(key: P2PRoleKey, value: unknown): P2PParamError | null {
  const example = `{"kv_request_id": "<unique id>", "remote_host": "10.0.0.2", "remote_port": 5710}`;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return {
      key,
      expected: 'an object with kv_request_id, remote_host and remote_port',
      received: value,
      hint: `Send e.g. "${key}": ${example}.`,
    };
  }
  const v = value as Record<string, unknown>;
  if (typeof v['kv_request_id'] !== 'string' || v['kv_request_id'] === '') {
    return {
      key: `${key}.kv_request_id`,
      expected: 'a non-empty string (the transaction id shared by both peers)',
      received: v['kv_request_id'],
      hint: 'Use the id the producer was given in remote_decoder.kv_request_id, or a fresh unique id.',
    };
  }
  if (typeof v['remote_host'] !== 'string' || v['remote_host'] === '') {
    return {
      key: `${key}.remote_host`,
      expected: "the peer's p2p host (its secondary tier's host)",
      received: v['remote_host'],
      hint: 'Use the host the peer binds its p2p control socket to (VLLM_P2P_SIDE_CHANNEL_HOST).',
    };
  }
  if (!isPort(v['remote_port'])) {
    return {
      key: `${key}.remote_port`,
      expected: "an integer port in 1..65535 (the peer's p2p base port + its data-parallel rank)",
      received: v['remote_port'],
      hint: 'Use the peer\'s p2p tier "port" (VLLM_P2P_SIDE_CHANNEL_PORT, default 5710) plus its data-parallel rank.',
    };
  }
  return null;
}

/**
 * The first problem with the request's p2p keys, or null. Absent and null keys are "not set".
 */
export function invalidP2PParams(params: KVTransferParams): P2PParamError | null {
  const present = P2P_ROLE_KEYS.filter((k) => params[k] !== undefined && params[k] !== null);
  if (present.length >= 2) {
    const allowed =
      present.length === 2 && present.includes('remote_decoder') && present.includes('remote_kv_source');
    if (!allowed) {
      const why =
        present.includes('remote_decoder') && present.includes('remote_prefiller')
          ? 'remote_prefiller and remote_decoder are contradictory roles'
          : 'remote_prefiller and remote_kv_source are two competing fetch sources';
      return {
        key: present.join('+'),
        expected:
          'one of remote_decoder, remote_prefiller, remote_kv_source, or remote_decoder + remote_kv_source',
        received: present,
        hint: `${why}: keep one (a prefill producer may add remote_kv_source to pull a cached prefix).`,
      };
    }
  }
  const decoder = params['remote_decoder'];
  if (decoder !== undefined && decoder !== null) {
    const d = decoder as Record<string, unknown>;
    if (typeof decoder !== 'object' || Array.isArray(decoder)) {
      return {
        key: 'remote_decoder',
        expected: 'an object with kv_request_id',
        received: decoder,
        hint: 'Send e.g. "remote_decoder": {"kv_request_id": "<unique id>"}.',
      };
    }
    if (typeof d['kv_request_id'] !== 'string' || d['kv_request_id'] === '') {
      return {
        key: 'remote_decoder.kv_request_id',
        expected: 'a non-empty string (the transaction id the decoder will fetch under)',
        received: d['kv_request_id'],
        hint: 'Allocate one unique id per transfer and send the same id to the decoder in remote_prefiller.',
      };
    }
  }
  for (const key of ['remote_prefiller', 'remote_kv_source'] as const) {
    const value = params[key];
    if (value === undefined || value === null) continue;
    const bad = sourceError(key, value);
    if (bad) return bad;
  }
  return null;
}

function readSource(value: unknown): P2PSource | null {
  if (value === undefined || value === null) return null;
  const v = value as Record<string, unknown>;
  return {
    kvRequestId: v['kv_request_id'] as string,
    host: v['remote_host'] as string,
    port: v['remote_port'] as number,
  };
}

/** The request's p2p roles; null when it has none. Call invalidP2PParams first (this trusts the shapes). */
export function readP2PRoles(params: KVTransferParams | null | undefined): P2PRoles | null {
  if (!params) return null;
  const d = params['remote_decoder'];
  const decoder =
    d !== undefined && d !== null
      ? { kvRequestId: (d as Record<string, unknown>)['kv_request_id'] as string }
      : null;
  const prefiller = readSource(params['remote_prefiller']);
  const kvSource = readSource(params['remote_kv_source']);
  if (!decoder && !prefiller && !kvSource) return null;
  return { decoder, prefiller, kvSource };
}

function formatSource(s: P2PSource): Record<string, unknown> {
  return { kv_request_id: s.kvRequestId, remote_host: s.host, remote_port: s.port };
}

/** The kv_transfer_params keys of these roles (what a proxy sends). */
export function formatP2PParams(roles: P2PRoles): KVTransferParams {
  const out: KVTransferParams = {};
  if (roles.decoder) out['remote_decoder'] = { kv_request_id: roles.decoder.kvRequestId };
  if (roles.prefiller) out['remote_prefiller'] = formatSource(roles.prefiller);
  if (roles.kvSource) out['remote_kv_source'] = formatSource(roles.kvSource);
  return out;
}
