import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LruMap } from '../../src/util/lru-map.ts';

test('LRU map evicts the least recently used entry, also when its capacity is lowered', () => {
  const m = new LruMap<string, number>(2);
  m.set('a', 1);
  m.set('b', 2);
  m.get('a');
  m.set('c', 3);
  assert.equal(m.has('b'), false);
  assert.equal(m.get('a'), 1);
  assert.equal(m.size, 2);
  m.capacity = 1;
  assert.deepEqual([m.has('a'), m.has('c'), m.size], [true, false, 1]);
  m.capacity = 0;
  assert.equal(m.capacity, 1, 'at least one entry');
});

test('LRU map: delete removes an entry and says whether it was there', () => {
  const m = new LruMap<string, number>(2);
  m.set('a', 1);
  assert.equal(m.delete('a'), true);
  assert.equal(m.delete('a'), false);
  assert.deepEqual([m.has('a'), m.size], [false, 0]);
});
