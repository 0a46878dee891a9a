import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KVEventBatch, WireKVEvent } from '../../src/kv-events/wire.ts';
import { reachableEndpoint } from '../../src/proxy/kv-events-feed.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';

const batch = (...events: WireKVEvent[]): KVEventBatch => ({ ts: 0, events, dataParallelRank: 0 });
const stored = (...hashes: bigint[]): WireKVEvent => ({
  type: 'BlockStored',
  blockHashes: hashes,
  parentBlockHash: null,
  tokenIds: [],
  blockSize: 16,
  loraId: null,
  medium: 'GPU',
  loraName: null,
});
const removed = (...hashes: bigint[]): WireKVEvent => ({
  type: 'BlockRemoved',
  blockHashes: hashes,
  medium: 'GPU',
});

test('the index counts copies: a block stays until every stored copy is removed', () => {
  const index = new KvBlockIndex();
  index.apply('a', batch(stored(1n, 2n, 3n), stored(2n)));
  assert.equal(index.prefixLength('a', [1n, 2n, 3n, 4n]), 3);
  index.apply('a', batch(removed(2n)));
  assert.equal(index.prefixLength('a', [1n, 2n, 3n]), 3, 'one copy of 2 is left');
  index.apply('a', batch(removed(2n)));
  assert.equal(index.prefixLength('a', [1n, 2n, 3n]), 1, 'a prefix stops at the first missing block');
  assert.equal(index.prefixLength('b', [1n]), 0);
  index.apply('a', batch({ type: 'AllBlocksCleared' }, stored(9n)));
  assert.equal(index.size('a'), 1);
});

test('pending blocks count until they expire; clear() forgets them with the rest', () => {
  const index = new KvBlockIndex();
  index.apply('a', batch(stored(1n)));
  index.markPending('a', [1n, 2n, 3n], 1_000);
  assert.equal(index.prefixLength('a', [1n, 2n, 3n, 4n], 999), 3);
  assert.equal(index.prefixLength('a', [1n, 2n, 3n, 4n], 1_000), 1, 'expired');
  index.markPending('a', [1n, 2n], 5_000);
  index.clear('a');
  assert.equal(index.prefixLength('a', [1n, 2n], 0), 0);
});

test('a wildcard bind address is replaced by the backend host', () => {
  assert.equal(reachableEndpoint('tcp://*:5557', '10.0.0.2'), 'tcp://10.0.0.2:5557');
  assert.equal(reachableEndpoint('tcp://0.0.0.0:5557', '127.0.0.1'), 'tcp://127.0.0.1:5557');
  assert.equal(reachableEndpoint('tcp://[::]:5557', '::1'), 'tcp://[::1]:5557');
  assert.equal(reachableEndpoint('tcp://127.0.0.1:5557', '10.0.0.2'), 'tcp://127.0.0.1:5557');
  assert.equal(reachableEndpoint('ipc:///tmp/kv', '10.0.0.2'), 'ipc:///tmp/kv');
});
