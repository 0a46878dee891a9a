import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Worker } from 'node:worker_threads';
import { startModuleWorker, stopWorker } from '../../src/util/start-worker.ts';

const HERE = new URL('./fixtures/entry.ts', import.meta.url).href;

async function firstMessage(worker: Worker): Promise<Record<string, unknown>> {
  try {
    return await new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
  } finally {
    await stopWorker(worker, 0);
  }
}

test('a self-contained entry runs bundled, without a loader: its data, its modules’ own URLs, stacks mapped to them', async () => {
  const msg = await firstMessage(
    startModuleWorker(HERE, 'bundled-worker', { n: 7 }, { selfContained: true }),
  );
  assert.deepEqual(msg['data'], { n: 7 });
  assert.equal(msg['entryUrl'], new URL('./fixtures/bundled-worker.ts', import.meta.url).href);
  assert.equal(msg['helperUrl'], new URL('./fixtures/bundled-worker-helper.ts', import.meta.url).href);
  assert.match(String(msg['raw']), /kvconnect-worker-bundles\/[0-9a-f]+\.mjs:\d+/, 'loaded from one bundle');
  assert.match(String(msg['mapped']), /fixtures\/bundled-worker-helper\.ts:\d+:\d+/, 'source-mapped');
});

test('the same entry, not marked self-contained, runs under tsx', async () => {
  const msg = await firstMessage(startModuleWorker(HERE, 'bundled-worker', { n: 8 }));
  assert.deepEqual(msg['data'], { n: 8 });
  assert.match(String(msg['raw']), /fixtures\/bundled-worker-helper\.ts:\d+/);
  assert.doesNotMatch(String(msg['raw']), /kvconnect-worker-bundles/);
});

test('a self-contained entry that imports a package falls back to tsx', async () => {
  const msg = await firstMessage(startModuleWorker(HERE, 'package-worker', null, { selfContained: true }));
  assert.deepEqual(msg['encoded'], [7]);
  assert.match(String(msg['raw']), /fixtures\/package-worker\.ts:\d+/);
});
