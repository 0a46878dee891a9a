/** Plain data the MoRIIO scheduler hands its workers each step (structured-clone safe). */
import type { MoRIIOPeer } from './addressing.ts';

/** Producer: the request ran this step; tokens [start, end) of its prompt were computed. */
export interface SaveJob {
  readonly reqId: string;
  readonly transferId: string;
  /** All of the request's blocks so far (group 0), by token-block position. */
  readonly blockIds: number[];
  readonly start: number;
  readonly end: number;
  /** True when this step computes the last prompt token. */
  readonly last: boolean;
}

/** Producer: the request finished and its blocks are held until the consumer is done. */
export interface SendJob {
  readonly reqId: string;
  readonly transferId: string;
  readonly consumerTpSize: number;
}

/** Consumer, WRITE: announce these blocks to the producer and wait for its writes. */
export interface WriteRecvJob {
  readonly reqId: string;
  readonly transferId: string;
  readonly blockIds: number[];
  readonly positions: number[];
  readonly peer: MoRIIOPeer;
}

/** Consumer, READ: pull remote blocks into local ones (paired), layer by layer, this step. */
export interface ReadJob {
  readonly reqId: string;
  readonly transferId: string;
  readonly localBlockIds: number[];
  readonly remoteBlockIds: number[];
  readonly peer: MoRIIOPeer;
}

/** Consumer: a load that cannot start (bad address); the worker reports its blocks invalid. */
export interface FailedLoad {
  readonly reqId: string;
  readonly blockIds: number[];
  readonly async: boolean;
}

export interface MoRIIOStepMetadata {
  [key: string]: unknown;
  readonly saves: SaveJob[];
  readonly sends: SendJob[];
  readonly writeRecvs: WriteRecvJob[];
  readonly reads: ReadJob[];
  readonly failedLoads: FailedLoad[];
  /** Producer transfers the scheduler gave up on (not held, or reaped): drop worker state. */
  readonly dropped: string[];
}

export function emptyStepMetadata(): MoRIIOStepMetadata {
  return { saves: [], sends: [], writeRecvs: [], reads: [], failedLoads: [], dropped: [] };
}
