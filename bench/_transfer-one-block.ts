/**
 * One timed one-block transfer, the latency samples of `npm run bench -- transfer` and
 * `transfer-warmup`: a READ of block 0 of region 0 (granted by the peer under `grantKey`) or a
 * WRITE of block 1 (recorded by the caller), timed from post to `waitFor`.
 */
import type { DescPair, TransferAgent } from '../src/transfer/index.ts';

const READ_ONE: DescPair[] = [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: 1 }];
const WRITE_ONE: DescPair[] = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 1 }];

/** The block a one-block READ reads (the peer grants it) and the one a WRITE writes (this side records it). */
export const ONE_BLOCK = { read: 0, write: 1 } as const;

/** Microseconds from post to completion; throws when the transfer fails. */
export async function timeOneBlock(
  agent: TransferAgent,
  remote: string,
  kind: 'READ' | 'WRITE',
  grantKey: string,
): Promise<number> {
  const t0 = performance.now();
  const h = kind === 'READ' ? agent.read(remote, READ_ONE, { grantKey }) : agent.write(remote, WRITE_ONE);
  const s = await agent.waitFor(h);
  const us = (performance.now() - t0) * 1000;
  agent.releaseHandle(h);
  if (s.state !== 'DONE') throw new Error(`one-block ${kind} failed: ${s.reason}`);
  return us;
}
