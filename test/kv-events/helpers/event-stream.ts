/**
 * A KV event stream like an engine's, for tests: prompt chains stored (some twice), evicted,
 * in two media, now and then cleared; deterministic per seed.
 */
import type { BlockStoredEvent, WireKVEvent } from '../../../src/kv-events/wire.ts';
import { mulberry32 } from '../../../src/util/mulberry32.ts';

const MEDIA = ['GPU', 'CPU'] as const;

/** A stream like an engine's: prompt chains stored (some twice), evicted, offloaded, now and then cleared. */
export function eventStream(seed: number, steps: number, clearRate = 0.0005): WireKVEvent[][] {
  const rand = mulberry32(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rand() * xs.length)]!;
  const resident = new Map<string, bigint[]>();
  const batches: WireKVEvent[][] = [];
  let next = 1n;
  for (let s = 0; s < steps; s++) {
    const events: WireKVEvent[] = [];
    for (let k = 0; k < 1 + Math.floor(rand() * 3); k++) {
      const r = rand();
      const medium = pick(MEDIA);
      const key = `${medium}`;
      const held = resident.get(key) ?? [];
      resident.set(key, held);
      if (r < 0.55) {
        // A chain of 1-4 blocks, extending a resident block or starting a prompt.
        const parent = held.length > 0 && rand() < 0.6 ? pick(held) : null;
        const n = 1 + Math.floor(rand() * 4);
        const hashes = Array.from({ length: n }, () => (next++ * 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn);
        events.push(stored(hashes, parent, medium));
        held.push(...hashes);
      } else if (r < 0.65 && held.length > 0) {
        // The same block stored again (a duplicate copy).
        const h = pick(held);
        events.push(stored([h], null, medium));
        held.push(h);
      } else if (r < 0.97 && held.length > 0) {
        const i = Math.floor(rand() * held.length);
        events.push({ type: 'BlockRemoved', blockHashes: [held[i]!], medium, groupIdx: 0 });
        held.splice(i, 1);
      } else if (r >= 1 - clearRate) {
        events.push({ type: 'AllBlocksCleared' });
        resident.clear();
      }
    }
    batches.push(events);
  }
  return batches;
}

export function stored(hashes: bigint[], parent: bigint | null, medium: string): BlockStoredEvent {
  return {
    type: 'BlockStored',
    blockHashes: hashes,
    parentBlockHash: parent,
    tokenIds: hashes.flatMap((h) => [Number(h % 1000n), Number((h >> 8n) % 1000n)]),
    blockSize: 2,
    loraId: null,
    medium,
    loraName: null,
    extraKeys: hashes.map(() => null),
    groupIdx: 0,
    kvCacheSpecKind: 'full_attention',
  };
}
