/**
 * Heterogeneous TP for MoRIIO WRITE
 * (docs/connectors/moriio.md#heterogeneous-tensor-parallelism). Blocks move whole, so MoRIIO
 * needs KV heads replicated on both sides (min(tp) ≥ total KV heads): tiny (2 KV heads) at
 * tp=2 is not replicated, so these tests use tiny's weights re-exported with one KV head.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { getModelPreset } from '../../../src/config/model-presets.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { generatePresetTensors, writeCheckpointDir } from '../../../src/engine/model/weights.ts';
import { PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { moriioOptions, moriioPorts, type PairSpec, runPair } from './helpers.ts';

let dir = '';
let expected: number[][] = [];
const prompts = [PROMPTS[0]!, PROMPTS[2]!];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvconnect-moriio-mqa-'));
  const preset = getModelPreset('tiny')!;
  const config = { ...preset.config, num_key_value_heads: 1 };
  writeCheckpointDir(dir, config, generatePresetTensors({ ...preset, config }));
  expected = await plainOutputs(dir, prompts);
});

after(() => rmSync(dir, { recursive: true, force: true }));

async function hetero(producerTp: number, consumerTp: number): Promise<void> {
  const spec: PairSpec = { model: dir, readMode: false, backend: 'xgmi', producerTp, consumerTp };
  const pPorts = await moriioPorts(producerTp);
  const dPorts = await moriioPorts(consumerTp);
  const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
  const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
  try {
    const { tokens } = await runPair(p, d, pPorts, dPorts, spec, prompts);
    assert.deepEqual(tokens, expected);
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

describe('MoRIIO WRITE with heterogeneous TP (one KV head, replicated)', { timeout: 60_000 }, () => {
  it('P tp=2 → D tp=1: token-identical to a single engine; pools drain', () => hetero(2, 1));
  it('P tp=1 → D tp=2: token-identical to a single engine; pools drain', () => hetero(1, 2));
});

describe('MoRIIO heterogeneous TP without replicated heads', { timeout: 60_000 }, () => {
  it('tiny (2 KV heads) P tp=1 → D tp=2 fails the load (replicated-heads rule); pools drain', async () => {
    const spec: PairSpec = {
      readMode: false,
      backend: 'xgmi',
      producerTp: 1,
      consumerTp: 2,
      deferTimeout: 0.5,
    };
    const pPorts = await moriioPorts(1);
    const dPorts = await moriioPorts(2);
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
    try {
      // D's ranks run in worker threads, so the error text (unit-tested in moriio-units) is
      // logged there; here: the load fails, no token is produced, and nothing leaks.
      const result = await runPair(p, d, pPorts, dPorts, spec, [PROMPTS[1]!]);
      assert.equal(result.tokens[0]?.length ?? 0, 0, 'the fail policy ends the request without tokens');
      await waitForEmptyPool(d);
      await waitForEmptyPool(p);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});
