import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { test } from 'node:test';
import { encode } from 'cbor2';
import fc from 'fast-check';
import { CborBlockKeyWriter, type ExtraKey } from '../../src/kv/cbor-block-key.ts';
import {
  BlockHashFunction,
  blockHashHex,
  createBlockHasher,
  externalBlockHash,
  noneHash,
} from '../../src/kv/index.ts';
import { murmur3x86_128 } from '../../src/kv/murmur3.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const env = {}; // no PYTHONHASHSEED
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
/** The independent oracle: cbor2's deterministic (CDE) encoder, then SHA-256. */
const oracle = (x: unknown) => new Uint8Array(hash('sha256', encode(x, { cde: true }), 'buffer'));

test('the test vectors of docs/kv-cache.md hold (sha256_cbor, default seed), and agree with cbor2', () => {
  const fn = new BlockHashFunction('sha256_cbor', env);
  assert.equal(blockHashHex(fn.noneHash), '9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0');
  assert.deepEqual(fn.noneHash, oracle('vllm-none-hash'));
  const b0 = fn.hashBlock(null, range(1, 16));
  assert.equal(blockHashHex(b0), 'cd7c51bc5a8fc8643f383a2b9e01522fba7473c669e9270c7b0bf7bf7fd01682');
  assert.equal(externalBlockHash(b0), 8866452693264111234n);
  assert.deepEqual(new Uint8Array(b0), oracle([fn.noneHash, range(1, 16), null]));
  const b1 = fn.hashBlock(b0, range(17, 16));
  assert.equal(blockHashHex(b1), '2533ea50426b36e9e4d68296cac6bce8cf602e46957d0fe40b368b33d87bf3bf');
  assert.equal(externalBlockHash(b1), 807986237951177663n);
  const salted = fn.hashBlock(null, range(1, 16), 0, 16, ['salt']);
  assert.equal(blockHashHex(salted), '165e432c5c158dc6a6de19504b1e4c272fbbf0c75f813dd8370b7f22cffe6783');
  // kvconnect's `sha256` is the same CBOR encoding (vLLM's pickle bytes cannot be reproduced).
  assert.deepEqual(new BlockHashFunction('sha256', env).hashBlock(b0, range(17, 16)), b1);
});

const extraKey: fc.Arbitrary<ExtraKey> = fc.letrec<{ key: ExtraKey }>((tie) => ({
  key: fc.oneof(
    { depthSize: 'small' },
    fc.string({ unit: 'grapheme', maxLength: 40 }),
    fc.integer({ min: -(2 ** 40), max: 2 ** 40 }),
    fc.uint8Array({ maxLength: 40 }),
    fc.array(tie('key'), { maxLength: 3 }),
  ),
})).key;

test('the hand-written CBOR writer matches cbor2 byte for byte', () => {
  const writer = new CborBlockKeyWriter();
  fc.assert(
    fc.property(
      fc.uint8Array({ minLength: 0, maxLength: 40 }),
      fc.array(
        fc.oneof(
          fc.nat(30),
          fc.nat(300),
          fc.nat(70000),
          fc.integer({ min: 2 ** 32 - 3, max: 2 ** 32 + 3 }),
          fc.maxSafeNat(),
          fc.integer({ min: -(2 ** 40), max: -1 }),
        ),
        { maxLength: 300 },
      ),
      fc.option(fc.array(extraKey, { maxLength: 4 })),
      (parent, tokens, extra) => {
        const mine = writer.encode(parent, tokens, 0, tokens.length, extra);
        const theirs = encode([parent, tokens, extra], { cde: true });
        assert.equal(Buffer.from(mine).toString('hex'), Buffer.from(theirs).toString('hex'));
      },
    ),
    { numRuns: 500 },
  );
});

test('BlockHasher hashes full blocks only and grows with the request', () => {
  const hasher = createBlockHasher(16, 'sha256_cbor', env);
  const req = { allTokenIds: range(1, 20), blockHashes: [] as Uint8Array[] };
  assert.equal(hasher.update(req), 1);
  assert.equal(
    blockHashHex(req.blockHashes[0]!),
    'cd7c51bc5a8fc8643f383a2b9e01522fba7473c669e9270c7b0bf7bf7fd01682',
  );
  assert.equal(hasher.update(req), 0, 'the partial block is not hashed');
  req.allTokenIds.push(...range(21, 12)); // decode appends tokens: now 32
  assert.equal(hasher.update(req), 1);
  assert.equal(
    blockHashHex(req.blockHashes[1]!),
    '2533ea50426b36e9e4d68296cac6bce8cf602e46957d0fe40b368b33d87bf3bf',
  );
  assert.deepEqual(hasher.hashTokens(range(1, 32)), req.blockHashes);
});

test('extra keys: salt on the first block only, LoRA name on every block, mm items by overlap', () => {
  const hasher = createBlockHasher(4, 'sha256_cbor', env);
  const fn = hasher.fn;
  const tokens = range(1, 8);
  const [s0, s1] = hasher.newHashes({ allTokenIds: tokens, blockHashes: [], cacheSalt: 'x' });
  const e0 = fn.hashBlock(null, tokens, 0, 4, ['x']);
  assert.deepEqual(s0, e0);
  assert.deepEqual(s1, fn.hashBlock(e0, tokens, 4, 8, null));
  const [l0, l1] = hasher.newHashes({
    allTokenIds: tokens,
    blockHashes: [],
    loraName: 'ada',
    cacheSalt: 'x',
  });
  const f0 = fn.hashBlock(null, tokens, 0, 4, ['ada', 'x']);
  assert.deepEqual(l0, f0);
  assert.deepEqual(l1, fn.hashBlock(f0, tokens, 4, 8, ['ada']));
  const mm = [{ identifier: 'img', offset: 3, length: 2 }];
  const [m0, m1] = hasher.newHashes({ allTokenIds: tokens, blockHashes: [], mmPlaceholders: mm });
  const g0 = fn.hashBlock(null, tokens, 0, 4, [['img', 3]]);
  assert.deepEqual(m0, g0);
  assert.deepEqual(m1, fn.hashBlock(g0, tokens, 4, 8, [['img', -1]]));
  assert.notDeepEqual(s0, hasher.hashTokens(tokens)[0]);
});

test('PYTHONHASHSEED overrides the NONE_HASH seed', () => {
  assert.deepEqual(noneHash('sha256_cbor', { PYTHONHASHSEED: '0' }), oracle('0'));
  assert.notDeepEqual(noneHash('sha256_cbor', { PYTHONHASHSEED: '0' }), noneHash('sha256_cbor', {}));
});

test('xxhash: 16-byte MurmurHash3 digests, random seed with a warning unless PYTHONHASHSEED', async () => {
  const { result, records } = await captureLogs(() => new BlockHashFunction('xxhash_cbor', {}));
  assert.equal(result.noneHash.length, 16);
  assert.ok(
    records.some((r) => r.level === 'warn' && r.message.includes('random per-process NONE_HASH seed')),
  );
  const seeded = new BlockHashFunction('xxhash', { PYTHONHASHSEED: '7' });
  assert.deepEqual(seeded.noneHash, murmur3x86_128(new CborBlockKeyWriter().encodeText('7')));
  const h = seeded.hashBlock(null, range(1, 16));
  const cbor = encode([seeded.noneHash, range(1, 16), null], { cde: true });
  assert.deepEqual(h, murmur3x86_128(cbor));
});

test('MurmurHash3 x86_128 reference vectors (seed 0x9747b28c)', () => {
  const enc = new TextEncoder();
  const hex = (s: string) => Buffer.from(murmur3x86_128(enc.encode(s), 0x9747b28c)).toString('hex');
  // Reference outputs of the C implementation, h1..h4 as little-endian words.
  assert.equal(hex(''), 'a1d5bef71c6a575b1c6a575b1c6a575b');
  assert.equal(hex('The quick brown fox jumps over the lazy dog'), '5ed5d48a7161b84c9c3aa78e3e79b6cd');
  assert.equal(hex('The quick brown fox jumps over the lazy cog'), '0e8829ccf91081107c6f5ebf3433e188');
});
