import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Decoder, encode } from '@msgpack/msgpack';
import {
  type BlockStoredEvent,
  decodeBatch,
  encodeBatch,
  KVEventDecodeError,
  type WireKVEvent,
} from '../../src/kv-events/wire.ts';

const raw = new Decoder({ useBigInt64: true });

const stored: BlockStoredEvent = {
  type: 'BlockStored',
  blockHashes: [2n ** 64n - 1n, 5n],
  parentBlockHash: null,
  tokenIds: [1, 2, 3, 4],
  blockSize: 2,
  loraId: null,
  medium: 'GPU',
  loraName: null,
  extraKeys: [['salt'], null],
  groupIdx: 0,
  kvCacheSpecKind: 'full_attention',
};
const events: WireKVEvent[] = [
  stored,
  { type: 'BlockRemoved', blockHashes: [7n], medium: 'CPU', groupIdx: 1 },
  { type: 'AllBlocksCleared' },
];

test('map layout: [float64 ts, tagged maps in declaration order, defaults omitted, rank]', () => {
  const bytes = encodeBatch({ ts: 1700000000, events, dataParallelRank: 0 });
  assert.equal(bytes[0], 0x93, 'a 3-element array');
  assert.equal(bytes[1], 0xcb, 'ts is float64 even when whole, as msgspec writes a float');
  const [ts, evs, rank] = raw.decode(bytes) as [number, Record<string, unknown>[], number];
  assert.equal(ts, 1700000000);
  assert.equal(rank, 0);
  assert.deepEqual(Object.keys(evs[0]!), [
    'type',
    'block_hashes',
    'parent_block_hash',
    'token_ids',
    'block_size',
    'lora_id',
    'medium',
    'lora_name',
    'extra_keys',
    'group_idx',
    'kv_cache_spec_kind',
  ]);
  assert.deepEqual(evs[0]!['block_hashes'], [2n ** 64n - 1n, 5], 'small hashes use the smallest int format');
  assert.equal(evs[0]!['parent_block_hash'], null, 'required fields stay even when None');
  assert.deepEqual(evs[1], { type: 'BlockRemoved', block_hashes: [7], medium: 'CPU', group_idx: 1 });
  assert.deepEqual(evs[2], { type: 'AllBlocksCleared' });
});

test('array layout (vLLM before PR #42892): tag first, trailing defaults trimmed', () => {
  const bytes = encodeBatch({ ts: 1.5, events, dataParallelRank: 2 }, 'array');
  const [, evs, rank] = raw.decode(bytes) as [number, unknown[][], number];
  assert.equal(rank, 2);
  assert.deepEqual(evs[0], [
    'BlockStored',
    [2n ** 64n - 1n, 5],
    null,
    [1, 2, 3, 4],
    2,
    null,
    'GPU',
    null,
    [['salt'], null],
    0,
    'full_attention',
  ]);
  assert.deepEqual(evs[1], ['BlockRemoved', [7], 'CPU', 1]);
  assert.deepEqual(evs[2], ['AllBlocksCleared']);
  const withHole: WireKVEvent = { type: 'BlockRemoved', blockHashes: [1n], medium: 'GPU', locality: 'LOCAL' };
  const [, [hole]] = raw.decode(encodeBatch({ ts: 0, events: [withHole], dataParallelRank: 0 }, 'array')) as [
    number,
    unknown[][],
  ];
  assert.deepEqual(hole, ['BlockRemoved', [1], 'GPU', null, 'LOCAL'], 'a default before a set field stays');
});

test('decodeBatch reads both layouts back to the same events', () => {
  for (const layout of ['map', 'array'] as const) {
    const batch = decodeBatch(encodeBatch({ ts: 12.25, events, dataParallelRank: 3 }, layout));
    assert.equal(batch.ts, 12.25);
    assert.equal(batch.dataParallelRank, 3);
    assert.deepEqual(batch.events, events);
  }
});

test('raw-digest hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) decode to their low 64 bits', () => {
  const digest = Uint8Array.from({ length: 32 }, (_, i) => i);
  const payload = encode([1.0, [{ type: 'BlockRemoved', block_hashes: [digest], medium: 'GPU' }], null]);
  const [e] = decodeBatch(payload).events;
  assert.equal(e?.type, 'BlockRemoved');
  assert.deepEqual((e as { blockHashes: bigint[] }).blockHashes, [0x18191a1b1c1d1e1fn]);
});

test('malformed batches are KVEventDecodeErrors', () => {
  const bad: unknown[] = [
    { ts: 1 },
    [1, 'x', 0],
    [1, [{ type: 'BlockMigrated' }], 0],
    [1, [{ type: 'BlockStored', block_hashes: 'nope' }], 0],
    [1, [42], 0],
  ];
  for (const value of bad) assert.throws(() => decodeBatch(encode(value)), KVEventDecodeError);
  assert.throws(() => decodeBatch(Uint8Array.from([0xc1])), KVEventDecodeError);
});
