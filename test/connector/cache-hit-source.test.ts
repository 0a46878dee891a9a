/**
 * vLLM's CacheHitSource: five labels fastest to slowest, a token needing several sources
 * counts under the slowest, and cutting counts down takes the slowest first.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  addCachedTokens,
  CACHE_HIT_SOURCES,
  type CachedTokensBySource,
  slowestSource,
  trimCachedTokens,
} from '../../src/connector/cache-hit-source.ts';

test("vLLM's labels, in its order", () => {
  assert.deepEqual(CACHE_HIT_SOURCES, ['device', 'host', 'p2p', 'disk', 'external_unspecified']);
  assert.equal(slowestSource(['host', 'disk']), 'disk');
  assert.equal(slowestSource(['external_unspecified', 'host']), 'external_unspecified');
  assert.equal(slowestSource(['p2p', 'host']), 'p2p');
});

test('counts add up, skip zeros, and are cut from the slowest source first', () => {
  const counts: CachedTokensBySource = {};
  addCachedTokens(counts, 'host', 32);
  addCachedTokens(counts, 'disk', 16);
  addCachedTokens(counts, 'disk', 8);
  addCachedTokens(counts, 'p2p', 0);
  assert.deepEqual(counts, { host: 32, disk: 24 });
  assert.deepEqual(trimCachedTokens(counts, 55), { host: 32, disk: 23 });
  assert.deepEqual(trimCachedTokens(counts, 20), { host: 20 });
  assert.deepEqual(trimCachedTokens(counts, 100), counts);
  assert.deepEqual(trimCachedTokens(counts, -1), {});
});
