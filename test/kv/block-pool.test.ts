import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { BlockPool, createBlockHasher, externalBlockHash, type KVBlock } from '../../src/kv/index.ts';

const hasher = createBlockHasher(4, 'sha256_cbor', {});
const tokens = Array.from({ length: 64 }, (_, i) => i + 1);
const hashes = hasher.hashTokens(tokens);

test('null block is block 0, never handed out; LRU eviction; free in reverse order', () => {
  const pool = new BlockPool({ numBlocks: 6, numGroups: 1, enableCaching: true, enableKvCacheEvents: true });
  assert.ok(pool.nullBlock.isNull);
  assert.equal(pool.nullBlock.blockId, 0);
  assert.equal(pool.numFreeBlocks, 5);
  const a = pool.getNewBlocks(3);
  assert.deepEqual(
    a.map((b) => b.blockId),
    [1, 2, 3],
  );
  pool.cacheFullBlocks({ allTokenIds: tokens, blockHashes: hashes }, a, 0, 3, 4, 0);
  const [stored] = pool.takeEvents();
  assert.deepEqual(stored, {
    type: 'BlockStored',
    blockHashes: hashes.slice(0, 3).map(externalBlockHash),
    parentBlockHash: null,
    tokenIds: tokens.slice(0, 12),
    blockSize: 4,
    groupIdx: 0,
    medium: 'GPU',
    loraName: null,
    loraId: null,
    extraKeys: [null, null, null],
  });
  pool.freeBlocksReversed(a);
  assert.deepEqual(pool.freeBlockIds(), [4, 5, 3, 2, 1], 'the tail of the sequence is evicted first');
  assert.equal(pool.getCachedBlock(hashes[1]!, [0])![0]!.blockId, 2, 'cached and free: still findable');
  pool.touch([a[0]!]);
  assert.equal(a[0]!.refCount, 1);
  assert.equal(pool.isFree(1), false);
  const b = pool.getNewBlocks(3); // 4, 5, then 3 is evicted
  assert.deepEqual(
    b.map((x) => x.blockId),
    [4, 5, 3],
  );
  assert.equal(pool.getCachedBlock(hashes[2]!, [0]), null);
  assert.deepEqual(pool.takeEvents(), [
    { type: 'BlockRemoved', blockHashes: [externalBlockHash(hashes[2]!)], groupIdx: 0, medium: 'GPU' },
  ]);
  assert.equal(pool.resetPrefixCache(), false, 'blocks in use');
  pool.freeBlocksReversed(b);
  pool.freeBlocksReversed([a[0]!]);
  assert.equal(pool.resetPrefixCache(), true);
  assert.deepEqual(pool.takeEvents(), [{ type: 'AllBlocksCleared' }]);
  assert.equal(pool.getCachedBlock(hashes[0]!, [0]), null);
  assert.throws(() => pool.getNewBlocks(6));
});

test('evictBlocks removes the hash; hash maps are per group', () => {
  const pool = new BlockPool({ numBlocks: 8, numGroups: 2, enableCaching: true });
  const g0 = pool.getNewBlocks(2);
  const g1 = pool.getNewBlocks(2);
  pool.cacheFullBlocks({ allTokenIds: tokens, blockHashes: hashes }, g0, 0, 2, 4, 0);
  assert.equal(pool.getCachedBlock(hashes[0]!, [0, 1]), null, 'group 1 has not cached it');
  pool.cacheFullBlocks({ allTokenIds: tokens, blockHashes: hashes }, g1, 0, 2, 4, 1);
  assert.deepEqual(
    pool.getCachedBlock(hashes[0]!, [0, 1])!.map((b) => b.blockId),
    [g0[0]!.blockId, g1[0]!.blockId],
  );
  pool.evictBlocks([g0[0]!.blockId]);
  assert.equal(pool.getCachedBlock(hashes[0]!, [0]), null);
  assert.ok(pool.getCachedBlock(hashes[0]!, [1]));
  assert.equal(g0[0]!.refCount, 1, 'eviction does not free the block');
});

test('token verification rejects a hash hit whose tokens differ', () => {
  const pool = new BlockPool({ numBlocks: 4, numGroups: 1, enableCaching: true, verifyTokensBlockSize: 4 });
  const blocks = pool.getNewBlocks(1);
  pool.cacheFullBlocks({ allTokenIds: tokens, blockHashes: hashes }, blocks, 0, 1, 4, 0);
  assert.ok(pool.getCachedBlock(hashes[0]!, [0], tokens, 0));
  assert.equal(pool.getCachedBlock(hashes[0]!, [0], [9, 9, 9, 9], 0), null);
});

test('property: random get/touch/cache/free/evict keeps the pool consistent', () => {
  const op = fc.oneof(
    fc.record({ kind: fc.constant('get' as const), n: fc.integer({ min: 1, max: 5 }) }),
    fc.record({ kind: fc.constant('free' as const), i: fc.nat() }),
    fc.record({ kind: fc.constant('touch' as const), h: fc.nat(15) }),
    fc.record({ kind: fc.constant('cache' as const), i: fc.nat() }),
    fc.record({ kind: fc.constant('evict' as const), id: fc.nat(12) }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
      const pool = new BlockPool({ numBlocks: 12, numGroups: 1, enableCaching: true });
      const owners: KVBlock[][] = [];
      const cachedBy = new Map<number, number>(); // blockId → hash index it was cached under
      let next = 0;
      for (const o of ops) {
        if (o.kind === 'get' && o.n <= pool.numFreeBlocks) {
          const got = pool.getNewBlocks(o.n);
          for (const b of got) cachedBy.delete(b.blockId); // handing out evicts
          owners.push(got);
        } else if (o.kind === 'free' && owners.length > 0) {
          pool.freeBlocksReversed(owners.splice(o.i % owners.length, 1)[0]!);
        } else if (o.kind === 'touch') {
          const hit = pool.getCachedBlock(hashes[o.h]!, [0]);
          if (hit) {
            pool.touch(hit);
            owners.push(hit);
          }
        } else if (o.kind === 'cache' && owners.length > 0) {
          const list = owners[o.i % owners.length]!;
          const fresh = list.filter((b) => b.blockHash === null);
          const hs = fresh.map(() => hashes[next++ % 16]!);
          pool.cacheFullBlocks({ allTokenIds: tokens, blockHashes: hs }, fresh, 0, fresh.length, 4, 0);
          for (const [j, b] of fresh.entries()) cachedBy.set(b.blockId, (next - fresh.length + j) % 16);
        } else if (o.kind === 'evict') {
          pool.evictBlocks([o.id]);
          cachedBy.delete(o.id);
        }
        // Invariants.
        const refs = new Map<number, number>();
        for (const list of owners) for (const b of list) refs.set(b.blockId, (refs.get(b.blockId) ?? 0) + 1);
        for (const b of pool.blocks) {
          if (b.isNull) {
            assert.equal(pool.isFree(0), false);
            continue;
          }
          assert.ok(b.refCount >= 0);
          assert.equal(b.refCount, refs.get(b.blockId) ?? 0, `ref count of ${b.blockId}`);
          assert.equal(pool.isFree(b.blockId), b.refCount === 0, 'free iff unreferenced');
        }
        assert.equal(refs.has(0), false, 'null block never handed out');
        assert.equal(pool.numFreeBlocks, 11 - refs.size);
        for (const [id, h] of cachedBy) {
          const hit = pool.getCachedBlock(hashes[h]!, [0]);
          assert.ok(hit, `block ${id} cached under hash ${h} is found until evicted`);
        }
      }
    }),
    { numRuns: 300 },
  );
});

test("BlockStored carries each block's extra keys: the LoRA name on every block, the cache salt on the first", () => {
  const pool = new BlockPool({ numBlocks: 6, numGroups: 1, enableCaching: true, enableKvCacheEvents: true });
  const blocks = pool.getNewBlocks(2);
  const req = { allTokenIds: tokens, blockHashes: hashes, cacheSalt: 'tenant-7', loraName: 'adapter' };
  pool.cacheFullBlocks(req, blocks, 0, 2, 4, 0);
  const [stored] = pool.takeEvents();
  assert.ok(stored?.type === 'BlockStored');
  assert.deepEqual(stored.extraKeys, [['adapter', 'tenant-7'], ['adapter']]);
  assert.equal(stored.loraName, 'adapter');
});
