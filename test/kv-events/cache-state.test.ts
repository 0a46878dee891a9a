/**
 * The publisher's state table: a snapshot applied to an empty index gives exactly what every
 * event since the start gives (duplicates, several media and groups, removals, clears
 * included), parents come before children, batches stay bounded, and the table holds the
 * resident blocks only (bounded; over its cap it refuses snapshots until AllBlocksCleared).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KVCacheState } from '../../src/kv-events/cache-state.ts';
import { decodeBatch, encodeBatch, type WireKVEvent } from '../../src/kv-events/wire.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';
import { mulberry32 } from '../../src/util/mulberry32.ts';
import { eventStream, stored } from './helpers/event-stream.ts';

for (const seed of [1, 2, 3, 4, 5]) {
  test(`a snapshot rebuilds the index every event built (seed ${seed})`, () => {
    const state = new KVCacheState();
    const watched = new KvBlockIndex();
    for (const events of eventStream(seed, 3000)) {
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

/** What a subscriber holds after applying `batches`: copies per (medium, locality, group, hash). */
function replay(batches: readonly (readonly WireKVEvent[])[]): Map<string, number> {
  const held = new Map<string, number>();
  const key = (e: { medium: string | null; locality?: string | null; groupIdx?: number | null }, h: bigint) =>
    JSON.stringify([e.medium, e.locality ?? null, e.groupIdx ?? null, String(h)]);
  for (const events of batches)
    for (const e of events) {
      if (e.type === 'AllBlocksCleared') held.clear();
      else if (e.type === 'BlockStored')
        for (const h of e.blockHashes) held.set(key(e, h), (held.get(key(e, h)) ?? 0) + 1);
      else
        for (const h of e.blockHashes) {
          const n = held.get(key(e, h)) ?? 0;
          if (n <= 1) held.delete(key(e, h));
          else held.set(key(e, h), n - 1);
        }
    }
  return held;
}

test('two tiers of one medium stay apart by locality: the snapshot is the replay', () => {
  const state = new KVCacheState();
  const all: WireKVEvent[][] = [];
  const rand = mulberry32(7);
  const localities = [undefined, 'LOCAL', 'REMOTE'] as const;
  const held: { h: bigint; locality: string | undefined }[] = [];
  for (let s = 0; s < 400; s++) {
    const locality = localities[Math.floor(rand() * 3)];
    const at = locality === undefined ? {} : { locality };
    let events: WireKVEvent[];
    if (held.length > 0 && rand() < 0.4) {
      const [gone] = held.splice(Math.floor(rand() * held.length), 1);
      const where = gone!.locality === undefined ? {} : { locality: gone!.locality };
      events = [{ type: 'BlockRemoved', blockHashes: [gone!.h], medium: 'STORAGE', groupIdx: 0, ...where }];
    } else {
      // Few distinct hashes, so one hash is often resident under two localities at once.
      const h = BigInt(1 + Math.floor(rand() * 12));
      events = [{ ...stored([h], null, 'STORAGE'), ...at }];
      held.push({ h, locality });
    }
    state.apply(events);
    all.push(events);
  }
  const snapshot = state.snapshot(8)!;
  const expected = replay(all);
  assert.ok(
    [...expected.keys()].some((k) => k.includes('"REMOTE"')),
    'the stream keeps remote blocks',
  );
  assert.deepEqual(new Map([...replay(snapshot)].sort()), new Map([...expected].sort()));
  // And through the wire, as a subscriber decodes it.
  const decoded = snapshot.map(
    (events) => decodeBatch(encodeBatch({ ts: 1, events, dataParallelRank: 0 })).events,
  );
  assert.deepEqual(new Map([...replay(decoded)].sort()), new Map([...expected].sort()));
});
