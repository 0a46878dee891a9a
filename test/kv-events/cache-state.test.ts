/**
 * The publisher's state table: a snapshot applied to an empty index gives exactly what every
 * event since the start gives (duplicates, several media and groups, removals, clears
 * included), parents come before children, batches stay bounded, and the table holds the
 * resident blocks only (bounded; over its cap it refuses snapshots until AllBlocksCleared).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KVCacheState } from '../../src/kv-events/cache-state.ts';
import {
  type BlockStoredEvent,
  decodeBatch,
  encodeBatch,
  type WireKVEvent,
} from '../../src/kv-events/wire.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';

/** A deterministic PRNG (mulberry32) so a failure can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const MEDIA = ['GPU', 'CPU'] as const;

/** A stream like an engine's: prompt chains stored (some twice), evicted, offloaded, now and then cleared. */
function stream(seed: number, steps: number): WireKVEvent[][] {
  const rand = rng(seed);
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
      } else if (r >= 0.9995) {
        events.push({ type: 'AllBlocksCleared' });
        resident.clear();
      }
    }
    batches.push(events);
  }
  return batches;
}

function stored(hashes: bigint[], parent: bigint | null, medium: string): BlockStoredEvent {
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

for (const seed of [1, 2, 3, 4, 5]) {
  test(`a snapshot rebuilds the index every event built (seed ${seed})`, () => {
    const state = new KVCacheState();
    const watched = new KvBlockIndex();
    for (const events of stream(seed, 3000)) {
      state.apply(events);
      watched.apply('b', { ts: 0, events, dataParallelRank: 0 });
    }
    const batches = state.snapshot(64)!;
    assert.ok(batches.length > 2, 'several batches');
    assert.deepEqual(batches[0], [{ type: 'AllBlocksCleared' }]);
    const late = new KvBlockIndex();
    late.apply('b', { ts: 0, events: [stored([42n], null, 'GPU')], dataParallelRank: 0 });
    const resident = new Set(
      state
        .snapshot(1 << 30)!
        .flat()
        .flatMap((e) => (e.type === 'BlockStored' ? e.blockHashes.map((h) => `${e.medium}:${h}`) : [])),
    );
    const announced = new Map<string, Set<bigint>>();
    for (const events of batches) {
      const blocks = events.reduce((n, e) => n + (e.type === 'BlockStored' ? e.blockHashes.length : 0), 0);
      assert.ok(blocks <= 64, `a batch holds ${blocks} blocks`);
      // Through the wire: what a subscriber decodes.
      const batch = decodeBatch(encodeBatch({ ts: 1, events, dataParallelRank: 0 }));
      for (const e of batch.events) {
        if (e.type !== 'BlockStored') continue;
        const seen = announced.get(e.medium!) ?? new Set();
        announced.set(e.medium!, seen);
        // Parent before child: a resident parent was announced first.
        if (e.parentBlockHash !== null && resident.has(`${e.medium}:${e.parentBlockHash}`))
          assert.ok(seen.has(e.parentBlockHash), 'parent announced before its child');
        for (const h of e.blockHashes) seen.add(h);
        assert.equal(e.tokenIds.length, e.blockHashes.length * 2);
      }
      late.apply('b', batch);
    }
    assert.deepEqual(new Map([...late.held('b')].sort()), new Map([...watched.held('b')].sort()));
  });
}

test('the table holds resident blocks only, and past its cap refuses snapshots until a clear', () => {
  const state = new KVCacheState(100);
  for (let i = 0n; i < 10_000n; i++) {
    state.apply([stored([i], null, 'GPU')]);
    if (i >= 50n) state.apply([{ type: 'BlockRemoved', blockHashes: [i - 50n], medium: 'GPU', groupIdx: 0 }]);
  }
  assert.equal(state.size, 50, 'stored minus removed');
  for (let i = 0n; i < 60n; i++) state.apply([stored([1_000_000n + i], null, 'CPU')]);
  assert.ok(state.overflowed);
  assert.equal(state.snapshot(), null);
  assert.equal(state.size, 0, 'nothing kept while over the cap');
  state.apply([{ type: 'AllBlocksCleared' }]);
  assert.deepEqual(state.snapshot(), [[{ type: 'AllBlocksCleared' }]]);
});
