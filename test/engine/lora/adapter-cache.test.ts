/**
 * The CPU LoRA cache (`--max-cpu-loras`): beyond its capacity the least recently used
 * adapter goes, and only that one is read from its directory again.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LoraAdapterCache } from '../../../src/engine/lora/adapter-cache.ts';
import type { LoRARequest } from '../../../src/engine/lora/lora-request.ts';
import { modelDims, rankShard } from '../../../src/engine/model/dims.ts';
import { loadModelConfig } from '../../../src/engine/model/load.ts';
import { KVError } from '../../../src/errors/index.ts';
import { FIXTURES as MODEL_FIXTURES } from '../model/helpers/oracle.ts';

const ADAPTER = fileURLToPath(new URL('./fixtures/all-targets-r4/', import.meta.url));
const dims = modelDims(loadModelConfig(join(MODEL_FIXTURES, 'hf', 'llama-gqa3-untied-f32')));

test('--max-cpu-loras: the least recently used adapter is evicted and read again on its next use', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvconnect-lora-cache-'));
  try {
    const req = (name: string, id: number): LoRARequest => {
      cpSync(ADAPTER, join(dir, name), { recursive: true });
      return { loraName: name, loraIntId: id, loraPath: join(dir, name) };
    };
    const [a, b, c] = [req('a', 1), req('b', 2), req('c', 3)];
    const cache = new LoraAdapterCache(dims, rankShard(dims, 0, 1));
    cache.capacity = 2;
    const held = new Map([a, b].map((r) => [r.loraName, cache.get(r)]));
    assert.equal(cache.get(a), held.get('a'), 'a held: the same weights, not read again');
    held.set('c', cache.get(c)); // b is the least recently used: it goes.
    // From here on a read from disk fails: what is served without one was held.
    rmSync(dir, { recursive: true, force: true });
    assert.equal(cache.get(a), held.get('a'));
    assert.equal(cache.get(c), held.get('c'));
    assert.throws(() => cache.get(b), KVError, 'b was evicted, so it is read again');
    // Lowering the capacity evicts at once: of a and c, a is now the least recently used.
    cache.get(c);
    cache.capacity = 1;
    assert.equal(cache.get(c), held.get('c'));
    assert.throws(() => cache.get(a), KVError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
