import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { getModelPreset } from '../../src/config/model-presets.ts';
import {
  type BlockHash,
  buildKVCacheConfig,
  type CacheRequest,
  createBlockHasher,
  createKVCacheManager,
} from '../../src/kv/index.ts';

const hasher = createBlockHasher(16, 'sha256_cbor', {});

interface Req extends CacheRequest {
  allTokenIds: number[];
  blockHashes: BlockHash[];
  numTokens: number;
  numComputedTokens: number;
}

function request(id: string, tokens: number[]): Req {
  const r: Req = {
    requestId: id,
    allTokenIds: [...tokens],
    numTokens: tokens.length,
    blockHashes: [],
    numComputedTokens: 0,
  };
  hasher.update(r);
  return r;
}

const seq = (from: number, n: number) => Array.from({ length: n }, (_, i) => (from + i) % 250);

function manager(
  preset: 'tiny' | 'tiny-hybrid',
  numBlocks: number,
  enablePrefixCaching = true,
  maxModelLen = 256,
) {
  const hfConfig = getModelPreset(preset)!.config;
  const kvCacheConfig = buildKVCacheConfig({ hfConfig, blockSize: 16, numBlocks, maxModelLen });
  return createKVCacheManager({ kvCacheConfig, enablePrefixCaching, maxModelLen, enableKvCacheEvents: true });
}

/** Schedules a request as vLLM's scheduler does for a prompt done in one step. */
function admit(m: ReturnType<typeof manager>, r: Req) {
  const hit = m.getComputedBlocks(r);
  const blocks = m.allocateSlots(r, r.numTokens - hit.numComputedTokens, {
    numNewComputedTokens: hit.numComputedTokens,
    newComputedBlocks: hit.blocks,
  });
  if (blocks) r.numComputedTokens = r.numTokens;
  return { hit, blocks };
}

test('single group: prefix hits, the last token is always computed, free keeps blocks cached', () => {
  const m = manager('tiny', 40);
  const a = request('a', seq(0, 64));
  const { hit, blocks } = admit(m, a);
  assert.equal(hit.numComputedTokens, 0);
  assert.deepEqual(blocks!.getBlockIds(), [[1, 2, 3, 4]]);
  assert.equal(m.takeEvents().length, 1);
  m.free('a');
  assert.equal(m.numFreeBlocks, 39);
  const same = request('b', seq(0, 64));
  const full = m.getComputedBlocks(same);
  assert.equal(full.numComputedTokens, 48, 'a full hit leaves the last block (token) to compute');
  const longer = request('c', seq(0, 70));
  const h = admit(m, longer);
  assert.equal(h.hit.numComputedTokens, 64);
  assert.deepEqual(m.getBlockIds('c'), [[1, 2, 3, 4, 5]]);
  assert.deepEqual(h.blocks!.getBlockIds(), [[5]]);
  assert.deepEqual(h.hit.blocks.getUnhashedBlockIds(), []);
  assert.deepEqual(m.getBlocks('c').getUnhashedBlockIds(), [5]);
  const other = request('d', seq(100, 40));
  assert.equal(m.getComputedBlocks(other).numComputedTokens, 0);
  assert.equal(m.resetPrefixCache(), false);
});

test('allocateSlots returns null when it does not fit, honouring reserved blocks', () => {
  const m = manager('tiny', 40, true, 512);
  const a = request('a', seq(0, 16 * 30));
  assert.ok(m.allocateSlots(a, a.numTokens));
  const b = request('b', seq(7, 16 * 9));
  assert.equal(m.allocateSlots(b, b.numTokens, { reservedBlocks: 1 }), null);
  assert.equal(m.numFreeBlocks, 9);
  assert.ok(m.allocateSlots(b, b.numTokens));
  assert.equal(m.numFreeBlocks, 0);
  assert.equal(m.usage, 1);
  m.free('a');
  m.free('b');
  assert.equal(m.usage, 0);
  assert.equal(m.resetPrefixCache(), true);
});

test('async load: delayCacheBlocks allocates without caching; cacheBlocks caches after the load', () => {
  const m = manager('tiny', 40);
  const r = request('r', seq(0, 50));
  const blocks = m.allocateSlots(r, 0, { numExternalComputedTokens: 49, delayCacheBlocks: true });
  assert.deepEqual(blocks!.getBlockIds(), [[]], 'external blocks are allocated as computed blocks');
  assert.equal(m.getBlockIds('r')[0]!.length, 4);
  assert.deepEqual(m.getBlocks('r').getUnhashedBlockIdsAllGroups(), [[1, 2, 3, 4]]);
  assert.equal(m.getComputedBlocks(request('x', seq(0, 50))).numComputedTokens, 0, 'nothing cached yet');
  m.cacheBlocks(r, 49);
  assert.equal(m.getComputedBlocks(request('y', seq(0, 50))).numComputedTokens, 48);
});

test('prefix caching off: no hits, no caching', () => {
  const m = manager('tiny', 40, false);
  const a = request('a', seq(0, 64));
  admit(m, a);
  m.free('a');
  assert.equal(m.getComputedBlocks(request('b', seq(0, 64))).numComputedTokens, 0);
  assert.deepEqual(m.takeEvents(), []);
});

test('tiny-hybrid (2 full + 4 sliding, window 32): sliding groups keep only the window', () => {
  const m = manager('tiny-hybrid', 200);
  assert.equal(m.numGroups, 3);
  const long = request('long', seq(0, 160)); // 10 blocks
  admit(m, long);
  assert.deepEqual(
    m.getBlockIds('long').map((g) => g.length),
    [10, 10, 10],
  );
  m.removeSkippedBlocks('long', 160);
  const ids = m.getBlockIds('long');
  // Tokens 0..128 are outside the window of the next token (160): blocks 0..7 become null.
  assert.deepEqual(ids[1]!.slice(0, 8), [0, 0, 0, 0, 0, 0, 0, 0]);
  assert.ok(ids[1]![8]! > 0 && ids[1]![9]! > 0);
  assert.ok(
    ids[0]!.every((id) => id > 0),
    'full attention keeps everything',
  );
  assert.deepEqual(m.getBlocks('long').getUnhashedBlockIdsAllGroups()[1], [], 'null blocks are skipped');
  assert.equal(m.numFreeBlocks, 199 - 30 + 16);
  // Decode appends a token: allocation trims again and adds one block per group.
  long.allTokenIds.push(1);
  for (let i = 0; i < 16; i++) long.allTokenIds.push(i);
  long.numTokens = 177;
  hasher.update(long);
  assert.ok(m.allocateSlots(long, 17));
  long.numComputedTokens = 177;
  m.free('long');
  // A new request with the same prefix hits in every group: full keeps all blocks, sliding only the window.
  const again = request('again', [...long.allTokenIds.slice(0, 160), 5, 5, 5]);
  const hit = m.getComputedBlocks(again);
  assert.equal(hit.numComputedTokens, 160);
  const hitIds = hit.blocks.getBlockIds();
  assert.equal(hitIds[0]!.length, 10);
  assert.equal(hitIds[1]!.filter((id) => id !== 0).length, 2, 'the last cdiv(31,16)=2 blocks');
  assert.deepEqual(m.getBlockIds('long'), [[], [], []], 'a freed request holds no blocks');
  // Evicting a full-attention block in the middle shortens the hit for every group.
  m.evictBlocks([hitIds[0]![4]!]);
  const shorter = m.getComputedBlocks(again);
  assert.equal(shorter.numComputedTokens, 64);
  assert.deepEqual(
    shorter.blocks.getBlockIds().map((g) => g.length),
    [4, 4, 4],
  );
  // Evicting the window's last block of one sliding group moves the hit left in all groups.
  const onlySliding = m.getComputedBlocks(request('s', [...long.allTokenIds.slice(0, 64), 9]));
  assert.equal(onlySliding.numComputedTokens, 64);
  m.evictBlocks([onlySliding.blocks.getBlockIds()[2]![3]!]);
  const afterSw = m.getComputedBlocks(request('s2', [...long.allTokenIds.slice(0, 64), 9]));
  assert.equal(afterSw.numComputedTokens, 48);
  assert.deepEqual(
    afterSw.blocks.getBlockIds().map((g) => g.length),
    [3, 3, 3],
  );
  const admitted = m.allocateSlots(again, 99, {
    numNewComputedTokens: 64,
    newComputedBlocks: shorter.blocks,
  });
  assert.ok(admitted);
  const held = m.getBlockIds('again');
  assert.deepEqual(
    held.map((g) => g.length),
    [11, 11, 11],
  );
  assert.deepEqual(held[1]!.slice(0, 2), [0, 0], 'hits outside the window are not held');
  assert.deepEqual(held[1]!.slice(2, 4), shorter.blocks.getBlockIds()[1]!.slice(2, 4));
});

test('property: random admit/decode/free/evict sequences keep the manager consistent', () => {
  const op = fc.oneof(
    fc.record({
      kind: fc.constant('admit' as const),
      prefix: fc.nat(3),
      len: fc.integer({ min: 1, max: 120 }),
    }),
    fc.record({ kind: fc.constant('decode' as const), i: fc.nat() }),
    fc.record({ kind: fc.constant('free' as const), i: fc.nat() }),
    fc.record({ kind: fc.constant('evict' as const), id: fc.nat(60) }),
  );
  for (const preset of ['tiny', 'tiny-hybrid'] as const) {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const m = manager(preset, 60);
        const live = new Map<string, Req>();
        let n = 0;
        for (const o of ops) {
          if (o.kind === 'admit') {
            const r = request(`r${n++}`, [...seq(o.prefix * 50, 48), ...seq(n * 7, o.len)]);
            const { hit, blocks } = admit(m, r);
            assert.ok(hit.numComputedTokens < r.numTokens && hit.numComputedTokens % 16 === 0);
            if (blocks) live.set(r.requestId, r);
            else m.free(r.requestId);
          } else if (o.kind === 'decode' && live.size > 0) {
            const r = [...live.values()][o.i % live.size]!;
            r.allTokenIds.push(o.i % 250);
            r.numTokens++;
            hasher.update(r);
            if (m.allocateSlots(r, 1)) r.numComputedTokens++;
          } else if (o.kind === 'free' && live.size > 0) {
            const id = [...live.keys()][o.i % live.size]!;
            m.free(id);
            live.delete(id);
          } else if (o.kind === 'evict') m.evictBlocks([o.id]);
          const owners = new Map<number, number>();
          for (const id of live.keys()) {
            for (const group of m.getBlockIds(id)) {
              for (const b of group) if (b !== 0) owners.set(b, (owners.get(b) ?? 0) + 1);
            }
          }
          for (const b of m.pool.blocks) {
            assert.ok(b.refCount >= 0);
            if (b.isNull) assert.equal(m.pool.isFree(0), false);
            else assert.equal(b.refCount, owners.get(b.blockId) ?? 0, `ref count of block ${b.blockId}`);
          }
          // Blocks shared between requests are only prefix-cache hits (same hash, same group).
          assert.equal(m.numFreeBlocks, 59 - owners.size);
        }
        for (const id of live.keys()) m.free(id);
        assert.equal(m.numFreeBlocks, 59, 'everything returns to the free list');
        assert.equal(m.resetPrefixCache(), true);
      }),
      { numRuns: 150 },
    );
  }
});
