/**
 * What an agent offers a same-host peer in the handshake, and how the peer maps it: its KV
 * regions (read-only, kv-map.ts) and with them its lease table (lease-table.ts). With the
 * owner's table the peer serves its own READs of granted blocks (direct-read.ts) and, since
 * protocol 5, pulls WRITEs of recorded blocks (docs/transfer.md#pulled-writes). Both sides of
 * a connection offer; each maps what the other offered.
 */
import type { AgentCore } from './agent-core.ts';
import { exposedBytes, exposedRegions, PeerKvMap } from './kv-map.ts';
import { LeaseViews } from './lease-table.ts';
import type { ExposedRegion } from './messages.ts';
import type { PeerLink } from './peer-link.ts';

export interface KvOffer {
  readonly kv?: readonly ExposedRegion[];
  readonly leases?: ExposedRegion;
}

/**
 * This agent's offer over `link`: its KV regions over shm (unless not offered), and its lease
 * table with them (not while an outgoing transform alters what this side sends: the peer would not see it).
 */
export function kvOffer(core: AgentCore, link: PeerLink): KvOffer {
  const kv = link.transport === 'shm' && core.offerKv ? exposedRegions(core.regions.values()) : [];
  if (kv.length === 0) return {};
  const table = core.leases();
  const leases = core.offerLeases && !core.outgoing && table ? exposedBytes(table.bytes, 0) : null;
  return leases ? { kv, leases } : { kv };
}

/** Maps the peer's offer into `link` (peerKv, and `direct` when the lease table came with it). */
export function mapPeerOffer(link: PeerLink, offer: KvOffer): void {
  link.peerKv = offer.kv ? PeerKvMap.map(offer.kv) : null;
  if (!link.peerKv || !offer.leases) return;
  link.peerLeaseMap = PeerKvMap.map([offer.leases]);
  const bytes = link.peerLeaseMap?.view(offer.leases.region, 0, offer.leases.length);
  const leases = bytes ? LeaseViews.open(bytes) : null;
  if (leases) link.direct = { kv: link.peerKv, leases };
}
