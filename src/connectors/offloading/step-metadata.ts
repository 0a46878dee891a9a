/** Scheduler → worker and worker → scheduler payloads of the OffloadingConnector (plain data). */
import type { P2PSource } from '../../wire/index.ts';

/** Copy one chunk of one group from GPU blocks into a CPU slot (and on to the secondary tiers). */
export interface StoreOp {
  key: string;
  group: number;
  slot: number;
  /** GPU block ids of the chunk, in order. */
  blockIds: number[];
  writeThrough: boolean;
}

/** One chunk of one group to load. */
export interface LoadItem {
  key: string;
  group: number;
  /** CPU slot to read (source 'cpu') or to promote into (source = tier index); -1 = no slot. */
  slot: number;
  /** 'cpu' or the index of the secondary tier that holds it. */
  source: 'cpu' | number;
  /** Destination GPU block per chunk position; 0 = skip (already local, or a null block). */
  blockIds: number[];
}

export interface LoadJob {
  reqId: string;
  async: boolean;
  items: LoadItem[];
  /** Where the request's p2p items come from (remote_prefiller / remote_kv_source). */
  p2p?: P2PSource;
}

/** Keep one computed chunk of a `remote_decoder` request for the decoder that fetches it (p2p tier). */
export interface ParkOp {
  kvRequestId: string;
  key: string;
  group: number;
  blockIds: number[];
}

export interface OffloadMetadata extends Record<string, unknown> {
  step: number;
  stores: StoreOp[];
  loads: LoadJob[];
  /** Present when a p2p tier is configured. */
  parks?: ParkOp[];
}

export interface OffloadWorkerMeta {
  /** The last step whose stores are now in the CPU tier. */
  step: number;
  /** Promotions from a secondary tier that completed into their CPU slot. */
  promoted: string[];
  /** Keys whose load failed (missing, corrupt, tier down): their slots hold nothing. */
  failed: string[];
  /** Keys written through to the secondary tiers, per tier index. */
  storedSecondary: { tier: number; keys: string[] }[];
  evictedSecondary: { tier: number; keys: string[] }[];
}

export const WORKER_META_KEY = 'offloading';
