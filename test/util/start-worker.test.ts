import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import type { Worker } from 'node:worker_threads';
import { startModuleWorker, stopWorker } from '../../src/util/start-worker.ts';

const HERE = new URL('./fixtures/entry.ts', import.meta.url).href;

async function firstMessage<T = Record<string, unknown>>(worker: Worker): Promise<T> {
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
  assert.match(
    String(msg['raw']),
    /kvconnect-worker-bundles-[^/]+\/[0-9a-f]+\.mjs:\d+/,
    'loaded from one bundle',
  );
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

test('a bundle is rebuilt when one of its files changes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'start-worker-'));
  try {
    writeFileSync(
      join(dir, 'entry.ts'),
      "import { parentPort } from 'node:worker_threads';\nimport { value } from './value.ts';\nparentPort!.postMessage(value);\n",
    );
    const start = () =>
      firstMessage(
        startModuleWorker(pathToFileURL(join(dir, 'x.ts')).href, 'entry', null, { selfContained: true }),
      );
    writeFileSync(join(dir, 'value.ts'), 'export const value: number = 1;\n');
    assert.equal(await start(), 1);
    assert.equal(await start(), 1);
    writeFileSync(join(dir, 'value.ts'), 'export const value: number = 2;\n');
    assert.equal(await start(), 2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a bundle directory others may write to is not used: tsx loads the entry', async () => {
  const dir = join(tmpdir(), `kvconnect-worker-bundles-${process.getuid?.() ?? 'user'}`);
  await firstMessage(startModuleWorker(HERE, 'bundled-worker', null, { selfContained: true }));
  chmodSync(dir, 0o777);
  try {
    const msg = await firstMessage(startModuleWorker(HERE, 'bundled-worker', null, { selfContained: true }));
    assert.match(String(msg['raw']), /fixtures\/bundled-worker-helper\.ts:\d+/);
  } finally {
    chmodSync(dir, 0o700);
  }
});
