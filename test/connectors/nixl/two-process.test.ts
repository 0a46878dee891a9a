import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../../src/engine/llm.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions } from './helpers.ts';

const here = path.dirname(fileURLToPath(import.meta.url));

it('two processes: D reads P over tcp and over shm, equals one engine; a killed P fails D fast', async () => {
  const model = 'tiny-hybrid';
  const prompts = [...PROMPTS, `${PROMPTS[0]} again`];
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(here, 'fixtures', 'producer.ts'), JSON.stringify(prompts), model],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const next = async (): Promise<string> => (await lines.next()).value as string;
  try {
    const params = JSON.parse(await next()) as Record<string, unknown>[];
    const expected = await plainOutputs(model, prompts);
    // prompts 0..1 over tcp, 2 over shm, 3 after P was killed.
    for (const [backend, idx] of [
      ['TCP', [0, 1]],
      ['SHM', [2]],
    ] as const) {
      const d = await LLM.create(
        engineOptions({ model, connector: 'NixlConnector', backend }, 'kv_consumer', `decode-${backend}`),
      );
      try {
        const outs = await d.generate(
          idx.map((i) => prompts[i]!),
          GREEDY,
          { kvTransferParams: idx.map((i) => params[i]!) },
        );
        assert.deepEqual(
          outs.map((o) => o.tokenIds),
          idx.map((i) => expected[i]),
        );
        for (const o of outs) assert.ok(o.metrics.numLocalComputedTokens <= 1);
        await waitForEmptyPool(d);
      } finally {
        await d.shutdown();
      }
    }
    child.stdin!.write('usage\n');
    // Prompt 3 is still held under its lease (nobody read it); the others were released.
    assert.ok(Number(await next()) > 0, 'the unread request still holds blocks on P');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const d = await LLM.create(
      engineOptions(
        { model, connector: 'NixlConnector', backend: 'TCP', policy: 'recompute' },
        'kv_consumer',
        'decode-late',
      ),
    );
    try {
      const t0 = Date.now();
      const [out] = await d.generate(prompts[3]!, GREEDY, { kvTransferParams: params[3]! });
      assert.ok(Date.now() - t0 < 10_000);
      assert.deepEqual(out!.tokenIds, expected[3], 'recompute after the producer died');
      await waitForEmptyPool(d);
    } finally {
      await d.shutdown();
    }
  } finally {
    child.kill('SIGKILL');
  }
});
