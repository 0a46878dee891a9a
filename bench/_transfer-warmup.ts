/**
 * Warming an agent pair's JavaScript before the timed transfers, as a running engine's is.
 *
 * The native baselines (memcpy, ucx_perftest, iperf3) run compiled code from their first
 * iteration, and ucx_perftest still runs 10000 warm-up iterations by default (`-w`). An agent's
 * per-transfer work (descriptors, grants, leases, frames, checks) is JavaScript: V8 runs it in
 * its interpreter until it has been called often enough to be optimized, which on the bench's
 * VM takes a few thousand transfers (docs/BENCHMARKS.md, "JIT warm-up"). An engine that has
 * served requests for a minute is past that; a benchmark that times an agent's first dozen
 * large transfers measures the interpreter. So before the timed rounds each pair runs `count`
 * rounds of the kinds of transfer it is timed on: a READ of granted blocks, a WRITE of recorded
 * blocks and a WRITE of blocks without records of a small transfer of the request's shape (its
 * regions, one block from the first run of each), then a one-block READ and WRITE (the latency
 * samples' shape). `--warmup-rounds 0` skips it and times the cold code.
 */
import type { DescPair, TransferAgent } from '../src/transfer/index.ts';
import { blockIdsOf, type Peer } from './_transfer-peer.ts';

/** Rounds run by default before the timed transfers (five transfers each, per pair). */
export const DEFAULT_WARMUP_ROUNDS = 3000;

/** One block from the first run of each region of `descs`: a small transfer of the request's shape. */
export function warmupDescs(descs: readonly DescPair[]): DescPair[] {
  const seen = new Set<number>();
  const out: DescPair[] = [];
  for (const d of descs) {
    if (seen.has(d.localRegion)) continue;
    seen.add(d.localRegion);
    out.push({ ...d, count: 1 });
  }
  return out;
}

/**
 * Runs `count` rounds of a READ (granted under key `warmup`), a WRITE of recorded blocks and a
 * WRITE of unrecorded blocks of `warmupDescs(descs)`, then a READ and a WRITE of its first block
 * alone, between `agent` and `peer`; throws when one fails. Returns the milliseconds it took.
 */
export async function warmUpPair(
  agent: TransferAgent,
  remote: string,
  peer: Peer,
  descs: readonly DescPair[],
  count: number,
): Promise<number> {
  if (count <= 0) return 0;
  const small = warmupDescs(descs);
  const one = small.slice(0, 1);
  const localIds = blockIdsOf(small, 'local');
  const steps = [
    ['READ', small],
    ['WRITE', small],
    ['WRITE_HASHED', small],
    ['READ', one],
    ['WRITE', one],
  ] as const;
  const t0 = performance.now();
  await peer.grant('warmup', blockIdsOf(small, 'remote'));
  for (let i = 0; i < count; i++) {
    for (const [kind, ds] of steps) {
      if (kind === 'WRITE') agent.recordBlocks(blockIdsOf(ds, 'local'));
      else if (kind === 'WRITE_HASHED') agent.forgetBlocks(localIds);
      const h = kind === 'READ' ? agent.read(remote, ds, { grantKey: 'warmup' }) : agent.write(remote, ds);
      const s = await agent.waitFor(h);
      agent.releaseHandle(h);
      if (s.state !== 'DONE') throw new Error(`warm-up ${kind} failed: ${s.reason}`);
    }
  }
  return performance.now() - t0;
}
