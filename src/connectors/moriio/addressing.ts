/**
 * Where a MoRIIO peer lives (docs/connectors/moriio.md#addressing-the-peer): read out of the
 * proxy's request id or the explicit kv_transfer_params keys (src/wire/moriio-params.ts),
 * with the peer's data-parallel rank folded to its node for the port offset.
 */
import type { KVTransferParams } from '../../connector/types.ts';
import { type MoRIIOZmqAddress, readMoRIIOPrefillPeer } from '../../wire/index.ts';
import { foldLocalRank } from './config.ts';

/** A peer engine: its base ports (before the per-worker offset) and its parallel layout. */
export interface MoRIIOPeer extends MoRIIOZmqAddress {
  /** The peer's data-parallel rank folded to its node (the port offset uses it). */
  readonly dpRankLocal: number;
  readonly tpSize: number;
}

/** The remote prefill engine of a consumer request; null when neither the id nor the params name it. */
export function prefillPeerOf(requestId: string, params: KVTransferParams): MoRIIOPeer | null {
  const peer = readMoRIIOPrefillPeer(requestId, params);
  if (!peer) return null;
  return { ...peer.address, dpRankLocal: foldLocalRank(peer.dpRank, peer.dpSizeLocal), tpSize: peer.tpSize };
}
