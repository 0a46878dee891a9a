/** Shared helpers of the MoRIIO tests: free port ranges, engine options, P/D runs in one process. */
import { randomUUID } from 'node:crypto';
import type { LLM, LLMOptions } from '../../../src/engine/llm.ts';
import { startProxy } from '../../../src/proxy/index.ts';
import { PROXY_DEFAULTS } from '../../../src/proxy/types.ts';
import { freePortRange } from '../../helpers/free-port.ts';
import { GREEDY, PROMPTS } from '../../helpers/llm.ts';

export interface MoriioSide {
  handshakePort: number;
  notifyPort: number;
}

export async function moriioPorts(tp = 1): Promise<MoriioSide> {
  return { handshakePort: await freePortRange(tp), notifyPort: await freePortRange(tp) };
}

export interface PairSpec {
  model?: string;
  readMode: boolean;
  backend: 'rdma' | 'xgmi';
  producerTp?: number;
  consumerTp?: number;
  transferTimeout?: number;
  deferTimeout?: number;
  policy?: 'fail' | 'recompute';
}

export function moriioOptions(
  spec: PairSpec,
  role: 'kv_producer' | 'kv_consumer',
  ports: MoriioSide,
  extra: Record<string, unknown> = {},
): LLMOptions {
  return {
    model: spec.model ?? 'tiny',
    num_gpu_blocks: 64,
    max_model_len: 256,
    tensor_parallel_size: (role === 'kv_producer' ? spec.producerTp : spec.consumerTp) ?? 1,
    kvTransferConfig: {
      kv_connector: 'MoRIIOConnector',
      kv_role: role,
      kv_load_failure_policy: spec.policy ?? 'fail',
      kv_connector_extra_config: {
        http_port: 8000,
        host_ip: '127.0.0.1',
        handshake_port: ports.handshakePort,
        notify_port: ports.notifyPort,
        backend: spec.backend,
        read_mode: spec.readMode,
        transfer_timeout: spec.transferTimeout ?? 10,
        defer_timeout: spec.deferTimeout ?? 60,
        ...extra,
      },
    },
  };
}

export function zmq(ports: MoriioSide): string {
  return `host:127.0.0.1,handshake:${ports.handshakePort},notify:${ports.notifyPort}`;
}

/** The proxy's request id: both peers' addresses and a 32-hex uuid. */
export function proxyRequestId(p: MoriioSide, d: MoriioSide): string {
  return `___prefill_addr_${zmq(p)}___decode_addr_${zmq(d)}_${randomUUID().replaceAll('-', '')}`;
}

export function producerParams(transferId: string, consumerTp = 1): Record<string, unknown> {
  return {
    do_remote_decode: true,
    do_remote_prefill: false,
    remote_engine_id: null,
    remote_block_ids: null,
    remote_dp_size: 1,
    remote_tp_size: consumerTp,
    transfer_id: transferId,
  };
}

export function consumerParams(transferId: string, producerTp = 1): Record<string, unknown> {
  return {
    do_remote_decode: false,
    do_remote_prefill: true,
    remote_engine_id: null,
    remote_block_ids: null,
    transfer_id: transferId,
    remote_dp_size: 1,
    remote_tp_size: producerTp,
    remote_dp_rank: 0,
  };
}

/**
 * One proxied request per prompt, as the proxy does it: WRITE fires P and D together,
 * READ runs P first and copies its block ids into D's params.
 */
export async function runPair(
  p: LLM,
  d: LLM,
  pPorts: MoriioSide,
  dPorts: MoriioSide,
  spec: PairSpec,
  prompts = PROMPTS,
): Promise<{ tokens: number[][]; pParams: (Record<string, unknown> | null)[] }> {
  const runs = prompts.map(async (prompt) => {
    const transferId = `tx-${randomUUID()}`;
    const rid = proxyRequestId(pPorts, dPorts);
    const pRun = p.generate(
      [prompt],
      { ...GREEDY, maxTokens: 1 },
      {
        requestIdPrefix: rid,
        kvTransferParams: producerParams(transferId, spec.consumerTp ?? 1),
      },
    );
    const dParams = consumerParams(transferId, spec.producerTp ?? 1);
    if (spec.readMode) {
      const [pOut] = await pRun;
      const returned = pOut?.kvTransferParams ?? {};
      const [dOut] = await d.generate([prompt], GREEDY, {
        requestIdPrefix: rid,
        kvTransferParams: {
          ...dParams,
          remote_engine_id: returned['remote_engine_id'],
          remote_block_ids: returned['remote_block_ids'],
        },
      });
      return { tokens: dOut?.tokenIds ?? [], pParams: pOut?.kvTransferParams ?? null };
    }
    const [[pOut], [dOut]] = await Promise.all([
      pRun,
      d.generate([prompt], GREEDY, { requestIdPrefix: rid, kvTransferParams: dParams }),
    ]);
    return { tokens: dOut?.tokenIds ?? [], pParams: pOut?.kvTransferParams ?? null };
  });
  const results = await Promise.all(runs);
  return { tokens: results.map((r) => r.tokens), pParams: results.map((r) => r.pParams) };
}

/** `kvconnect proxy` with no backends, waiting for MoRIIO discovery pings on a free port. */
export function startDiscoveryProxy(): ReturnType<typeof startProxy> {
  return startProxy({
    ...PROXY_DEFAULTS,
    prefill: [],
    decode: [],
    port: 0,
    discoveryPort: 0,
    discoveryHost: '127.0.0.1',
    push: {},
  } as Parameters<typeof startProxy>[0]);
}
