/**
 * Negative control of the disaggregation oracle: garbage written into the blocks D just
 * loaded from P (after the transfer and its checksums succeeded, so nothing reports it)
 * must change the generated token ids. If the comparison of token ids were blind, or D
 * recomputed the prompt instead of using the transferred KV, this test would fail.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_MODEL } from '../../../src/config/model-presets.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import { GREEDY, plainOutputs } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

const PROMPT = [
  'And it came to pass in those days, that the people went up unto the city of the king.',
  'And they brought gifts in their hands, and stood before the gate until the evening.',
  'Then the king called his servants, and said unto them,',
].join('\n');
const PAIR: PairOptions = { model: DEFAULT_MODEL, connector: 'NixlConnector', backend: 'TCP' };

/** Overwrites every block of D's KV memory (except the null block) with a fixed pattern. */
function trashKV(llm: LLM): Promise<() => number> {
  return llm.engine().then((e) => {
    const executor = e.engine.executor;
    assert.ok(executor instanceof LocalExecutor, 'tp=1 runs the model in this process');
    const { kv, connector } = executor.runner;
    assert.ok(connector, 'D has its worker connector');
    let bytes = 0;
    const real = connector.getFinished.bind(connector);
    connector.getFinished = async (ids) => {
      const finished = await real(ids);
      if ((finished.recving ?? []).length > 0) {
        for (let t = 0; t < kv.tensors.length; t++) {
          const view = kv.blockRange(t, 1, kv.numBlocks - 1);
          const floats = new Float32Array(view.buffer, view.byteOffset, view.byteLength / 4);
          for (let i = 0; i < floats.length; i++) floats[i] = ((i * 7919) % 17) - 8;
          bytes += view.byteLength;
        }
      }
      return finished;
    };
    return () => bytes;
  });
}

async function decodeOnD(corrupt: boolean): Promise<{ tokens: number[]; trashed: number }> {
  const p = await LLM.create(engineOptions(PAIR, 'kv_producer', 'prefill-corrupt'));
  const d = await LLM.create(engineOptions(PAIR, 'kv_consumer', 'decode-corrupt'));
  try {
    const trashed = corrupt ? await trashKV(d) : () => 0;
    const [pOut] = await p.generate([PROMPT], { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
    const [dOut] = await d.generate([PROMPT], GREEDY, { kvTransferParams: [pOut?.kvTransferParams ?? null] });
    assert.ok(dOut, 'D answered');
    assert.equal(dOut.finishReason, 'length', dOut.error?.message);
    assert.ok(dOut.metrics.numExternalTokens > 16, 'D loaded the prompt from P');
    assert.ok(dOut.metrics.numLocalComputedTokens <= 1, 'D computed at most the last prompt token');
    return { tokens: dOut.tokenIds, trashed: trashed() };
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

test('corrupting the KV that D loaded from P changes the tokens; the untouched transfer does not', async () => {
  const [expected] = await plainOutputs(PAIR.model, [PROMPT]);
  const clean = await decodeOnD(false);
  assert.deepEqual(clean.tokens, expected, 'disaggregated = plain when the KV is intact');
  const corrupted = await decodeOnD(true);
  assert.ok(corrupted.trashed > 0, 'the hook overwrote the loaded blocks');
  assert.notDeepEqual(corrupted.tokens, expected, 'garbage KV must change the generated token ids');
});
