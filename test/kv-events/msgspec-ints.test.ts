/**
 * KV events carry every integer as msgspec writes it (the smallest msgpack integer format,
 * never a float) across the whole 64-bit range of block hashes, and both our decoder and the
 * vLLM-style Python subscriber refuse what msgspec refuses (a float where an int is due).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Encoder, encode } from '@msgpack/msgpack';
import fc from 'fast-check';
import { msgspecInt, strictDecoder, WireFloat } from '../../src/kv-events/msgspec-msgpack.ts';
import {
  type BlockRemovedEvent,
  type BlockStoredEvent,
  decodeBatch,
  encodeBatch,
  KVEventDecodeError,
  type WireKVEvent,
} from '../../src/kv-events/wire.ts';

const SCRIPT = fileURLToPath(new URL('./fixtures/vllm_kv_events_subscriber.py', import.meta.url));
const encoder = new Encoder({ useBigInt64: true });

/** msgpack's smallest integer format for v, written from the msgpack spec's format table. */
function smallestIntFormat(v: bigint): Uint8Array {
  const be = (head: number, bytes: number, signed: boolean) => {
    const out = new Uint8Array(1 + bytes);
    out[0] = head;
    let x = signed ? BigInt.asUintN(bytes * 8, v) : v;
    for (let i = bytes; i >= 1; i--) {
      out[i] = Number(x & 0xffn);
      x >>= 8n;
    }
    return out;
  };
  if (v >= 0n) {
    if (v < 0x80n) return Uint8Array.of(Number(v));
    if (v < 0x100n) return be(0xcc, 1, false);
    if (v < 0x10000n) return be(0xcd, 2, false);
    if (v < 0x100000000n) return be(0xce, 4, false);
    return be(0xcf, 8, false);
  }
  if (v >= -32n) return Uint8Array.of(Number(BigInt.asUintN(8, v)));
  if (v >= -0x80n) return be(0xd0, 1, true);
  if (v >= -0x8000n) return be(0xd1, 2, true);
  if (v >= -0x80000000n) return be(0xd2, 4, true);
  return be(0xd3, 8, true);
}

/** Whole 64-bit range, with every format boundary (and its neighbours) drawn often. */
const boundaries = [0n, 7n, 8n, 16n, 31n, 32n, 53n, 63n, 64n].flatMap((b) => [
  2n ** b - 1n,
  2n ** b,
  2n ** b + 1n,
]);
const uint64 = fc.oneof(
  fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  fc.constantFrom(...boundaries.filter((b) => b < 2n ** 64n)),
  fc.bigInt({ min: 2n ** 32n, max: 2n ** 53n }),
);
const int64 = fc.oneof(
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 64n - 1n }),
  fc.constantFrom(...boundaries.filter((b) => b <= 2n ** 63n).map((b) => -b)),
);

test('msgspecInt: every int in [-2^63, 2^64) encodes in the smallest msgpack integer format', () => {
  fc.assert(
    fc.property(int64, (v) => {
      assert.deepEqual(encoder.encode(msgspecInt(v)), smallestIntFormat(v));
      if (Number.isSafeInteger(Number(v)) && BigInt(Number(v)) === v)
        assert.deepEqual(
          encoder.encode(msgspecInt(Number(v))),
          smallestIntFormat(v),
          'same from a JS number',
        );
    }),
    { numRuns: 2000 },
  );
  assert.throws(() => msgspecInt(2n ** 64n), RangeError);
  assert.throws(() => msgspecInt(1.5), RangeError);
});

test('the strict decoder boxes wire floats and keeps integers apart', () => {
  const d = strictDecoder();
  const [f64, f32, i, big] = d.decode(
    Uint8Array.of(
      0x94,
      0xcb,
      0x3f,
      0xf0,
      0,
      0,
      0,
      0,
      0,
      0,
      0xca,
      0x40,
      0,
      0,
      0,
      0x01,
      0xcf,
      0,
      0,
      0,
      1,
      0,
      0,
      0,
      0,
    ),
  ) as unknown[];
  assert.ok(f64 instanceof WireFloat && f64.value === 1, 'float64 1.0 is a float');
  assert.ok(f32 instanceof WireFloat && f32.value === 2, 'float32 2.0 is a float');
  assert.equal(i, 1);
  assert.equal(big, 2n ** 32n);
});

const hashes = fc.array(uint64, { minLength: 1, maxLength: 40 });
const eventArb: fc.Arbitrary<WireKVEvent> = fc.oneof(
  fc.record({
    type: fc.constant('BlockStored' as const),
    blockHashes: hashes,
    parentBlockHash: fc.option(uint64),
    tokenIds: fc.array(fc.integer({ min: 0, max: 2 ** 32 - 1 }), { maxLength: 8 }),
    blockSize: fc.integer({ min: 1, max: 2 ** 20 }),
    loraId: fc.option(fc.integer({ min: 0, max: 2 ** 31 - 1 })),
    medium: fc.constantFrom('GPU', 'CPU', 'STORAGE'),
    loraName: fc.option(fc.string()),
    groupIdx: fc.option(fc.integer({ min: 0, max: 1000 })),
  }) as fc.Arbitrary<BlockStoredEvent>,
  fc.record({
    type: fc.constant('BlockRemoved' as const),
    blockHashes: hashes,
    medium: fc.constantFrom('GPU', 'CPU'),
  }) as fc.Arbitrary<BlockRemovedEvent>,
);
const batchArb = fc.record({
  ts: fc.double({ min: 0, max: 2e9, noNaN: true }),
  events: fc.array(eventArb, { minLength: 1, maxLength: 4 }),
  dataParallelRank: fc.integer({ min: 0, max: 64 }),
});

/** Every integer of a strictly decoded value; fails on any float outside the timestamp. */
function integers(v: unknown, out: (number | bigint)[] = []): (number | bigint)[] {
  assert.ok(!(v instanceof WireFloat), 'no float but ts');
  if (typeof v === 'number' || typeof v === 'bigint') out.push(v);
  else if (Array.isArray(v)) for (const x of v) integers(x, out);
  else if (typeof v === 'object' && v !== null) for (const x of Object.values(v)) integers(x, out);
  return out;
}

test('property: batches keep every hash exact, with no float and no oversized int format', () => {
  const d = strictDecoder();
  fc.assert(
    fc.property(batchArb, fc.constantFrom('map', 'array' as const), (batch, layout) => {
      const bytes = encodeBatch(batch, layout as 'map' | 'array');
      const [ts, ...rest] = d.decode(bytes) as unknown[];
      assert.ok(ts instanceof WireFloat);
      for (const n of integers(rest)) {
        // useBigInt64 decodes exactly the uint64/int64 formats to bigints.
        if (typeof n === 'bigint') assert.ok(n >= 2n ** 32n || n < -(2n ** 31n), `${n} written in 64 bits`);
        else assert.ok(n < 2 ** 32 && n >= -(2 ** 31), `${n} written below 64 bits`);
      }
      assert.deepEqual(decodeBatch(bytes), { ...batch, events: batch.events.map(withoutNulls) });
    }),
    { numRuns: 300 },
  );
});

/** What decoding gives back: optional fields left at None are not written. */
function withoutNulls(e: WireKVEvent): WireKVEvent {
  const out: Record<string, unknown> = { ...e };
  for (const k of ['groupIdx', 'extraKeys', 'kvCacheSpecKind', 'kvCacheSpecSlidingWindow', 'locality'])
    if (out[k] === null || out[k] === undefined) delete out[k];
  return out as unknown as WireKVEvent;
}

interface PyResult {
  events?: { block_hashes: string[]; parent_block_hash?: string | null; token_ids?: number[] }[];
  error?: string;
}

function pythonDecode(payloads: Uint8Array[]): PyResult[] {
  const res = spawnSync('/usr/bin/python3', [SCRIPT, '--decode'], {
    input: payloads.map((p) => Buffer.from(p).toString('hex')).join('\n'),
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(res.status, 0, res.stderr);
  return res.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as PyResult);
}

test('property: the vLLM-style Python subscriber reads every hash of every batch exactly', () => {
  const batches = fc.sample(batchArb, { numRuns: 150, seed: 28 });
  const layouts = batches.map((_, i): 'map' | 'array' => (i % 2 ? 'array' : 'map'));
  const got = pythonDecode(batches.map((b, i) => encodeBatch(b, layouts[i])));
  assert.equal(got.length, batches.length);
  let above32 = 0;
  batches.forEach((batch, i) => {
    assert.equal(got[i]!.error, undefined, got[i]!.error);
    (batch.events as (BlockStoredEvent | BlockRemovedEvent)[]).forEach((e, j) => {
      const py = got[i]!.events![j]!;
      assert.deepEqual(
        py.block_hashes,
        e.blockHashes.map((h) => h.toString()),
      );
      if (e.type === 'BlockStored') {
        assert.equal(py.parent_block_hash, e.parentBlockHash === null ? null : e.parentBlockHash.toString());
        assert.deepEqual(py.token_ids, e.tokenIds);
      }
      above32 += e.blockHashes.filter((h) => h >= 2n ** 32n && h <= 2n ** 53n).length;
    });
  });
  assert.ok(above32 > 0, 'the sample includes hashes in (2^32, 2^53], where float64 used to slip in');
});

/** Payloads msgspec would refuse: a float (or a bool) where vLLM's structs declare an int. */
const refused: [string, unknown][] = [
  ['a block hash as float64', { type: 'BlockRemoved', block_hashes: [2 ** 40 + 0.5], medium: 'GPU' }],
  ['a parent hash as float64', stored({ parent_block_hash: 1.5 })],
  ['a token id as float64', stored({ token_ids: [1, 2.5] })],
  ['block_size as float64', stored({ block_size: 16.5 })],
  ['block_size as a bool', stored({ block_size: true })],
  ['a token id above u32', stored({ token_ids: [2 ** 32] })],
  ['a missing required field', { type: 'BlockRemoved', block_hashes: [1] }],
  ['medium as an int', { type: 'BlockRemoved', block_hashes: [1], medium: 3 }],
];

function stored(over: Record<string, unknown>): Record<string, unknown> {
  return {
    type: 'BlockStored',
    block_hashes: [1],
    parent_block_hash: null,
    token_ids: [1, 2],
    block_size: 16,
    lora_id: null,
    medium: 'GPU',
    lora_name: null,
    ...over,
  };
}

/** A float written as float64 even when whole: the way a broken publisher writes 2^40. */
function withFloatHash(): Uint8Array {
  const enc = new Encoder({ forceIntegerToFloat: true });
  const event = encode({ type: 'BlockRemoved', medium: 'GPU' });
  const hashes = enc.encode([2 ** 40]);
  // {type, medium} + block_hashes: rebuild as a 3-entry map by hand.
  const key = encode('block_hashes');
  const body = Uint8Array.from([0x83, ...event.subarray(1), ...key, ...hashes]);
  return Uint8Array.from([0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, ...body, 0x00]);
}

test('a float where an int is due is refused by our decoder and by the Python subscriber', () => {
  const payloads = [...refused.map(([, e]) => encode([1.5, [e], 0])), withFloatHash()];
  const names = [...refused.map(([n]) => n), 'a whole hash 2^40 written as float64'];
  const py = pythonDecode(payloads);
  payloads.forEach((p, i) => {
    assert.throws(() => decodeBatch(p), KVEventDecodeError, names[i]);
    assert.ok(py[i]!.error, `python accepted ${names[i]}`);
  });
  assert.throws(
    () => decodeBatch(withFloatHash()),
    /Expected `int \| bytes`, got `float` - at `\$\[1\]\[0\]\.block_hashes\[0\]`/,
  );
  // Control: the same event with an integer hash is read by both.
  const ok = encodeBatch({
    ts: 1,
    events: [{ type: 'BlockRemoved', blockHashes: [2n ** 40n], medium: 'GPU' }],
    dataParallelRank: 0,
  });
  assert.equal(decodeBatch(ok).events.length, 1);
  assert.deepEqual(pythonDecode([ok])[0]!.events![0]!.block_hashes, [String(2 ** 40)]);
});

test('negative int64 hashes (other publishers) read as their unsigned 64-bit value, as Dynamo and llm-d do', () => {
  const payload = encode(
    [1.5, [{ type: 'BlockRemoved', block_hashes: [-1n, -(2n ** 63n)], medium: 'GPU' }], 0],
    {
      useBigInt64: true,
    },
  );
  assert.deepEqual((decodeBatch(payload).events[0] as BlockRemovedEvent).blockHashes, [
    2n ** 64n - 1n,
    2n ** 63n,
  ]);
  assert.deepEqual(pythonDecode([payload])[0]!.events![0]!.block_hashes, [
    String(2n ** 64n - 1n),
    String(2n ** 63n),
  ]);
});
