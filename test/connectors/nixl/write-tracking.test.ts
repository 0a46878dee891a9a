/**
 * Write tracking (docs/connector-api.md#write-tracking) in a P/D pair: the prefill engine's
 * model runner tells the NIXL worker which blocks each forward pass filled and which the
 * scheduler gave to new content, and the worker's transfer agent records and forgets their
 * checksums. Two consequences are checked end to end:
 * - KV changed after the forward pass filled it is caught by D's checksum check (the grant
 *   sends the checksums recorded at fill time; hashing at grant time would vouch for the
 *   changed bytes and D would silently decode from them);
 * - blocks reused for other requests never carry a stale record (a small pool cycles through
 *   its blocks; every transfer succeeds and D matches the single engine).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_MODEL } from '../../../src/config/model-presets.ts';
import type { LLM } from '../../../src/engine/llm.ts';
import { LLM as Engine } from '../../../src/engine/llm.ts';
import { GREEDY, plainOutputs } from '../../helpers/llm.ts';
import { changeAfterFill, countLoadErrors, runner } from '../helpers/write-tracking.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

/** In-thread agents: a record is taken within kvBlocksFilled, before the hook below runs. */
const PAIR: PairOptions = {
  model: DEFAULT_MODEL,
  connector: 'NixlConnector',
  backend: 'TCP',
  extra: { transfer_thread: false },
};

/** P prefills, D decodes from P's KV; returns D's tokens and its failed transfers. */
async function disaggregated(p: LLM, d: LLM, prompt: string) {
  const [pOut] = await p.generate([prompt], { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
  const [dOut] = await d.generate([prompt], GREEDY, { kvTransferParams: [pOut?.kvTransferParams ?? null] });
  assert.ok(dOut, 'D answered');
  assert.equal(dOut.finishReason, 'length', dOut.error?.message);
  return dOut;
}

const PROMPT = [
  'And it came to pass in those days, that the people went up unto the city of the king.',
  'And they brought gifts in their hands, and stood before the gate until the evening.',
].join('\n');

describe('write tracking in a P/D pair (NixlConnector, in-thread agents)', () => {
  it('catches KV that changed after the forward pass filled it; D recomputes and matches the single engine', async () => {
    const [expected] = await plainOutputs(PAIR.model, [PROMPT]);
    const p = await Engine.create(engineOptions(PAIR, 'kv_producer', 'prefill-wt'));
    const d = await Engine.create(
      engineOptions({ ...PAIR, policy: 'recompute' }, 'kv_consumer', 'decode-wt'),
    );
    try {
      const { kv, connector } = await runner(p);
      const loadErrors = countLoadErrors((await runner(d)).connector);
      const changed = changeAfterFill(connector, kv, 5);
      const dOut = await disaggregated(p, d, PROMPT);
      assert.ok(changed() > 0, 'the prefill filled blocks');
      assert.ok(loadErrors() > 0, "D's READ failed its checksum check");
      assert.deepEqual(
        dOut.tokenIds,
        expected,
        'D recomputed the prompt instead of decoding from the changed KV',
      );
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });

  it('never sends a stale record of a reused block: a small pool cycles, every transfer succeeds', async () => {
    const prompts = Array.from(
      { length: 10 },
      (_, i) =>
        `Request ${i}: ${'and the word of the king went out into every city '.repeat(3 + (i % 3))}${i}`,
    );
    const expected = await plainOutputs(PAIR.model, prompts);
    const small = { ...PAIR, numBlocks: 18 };
    const p = await Engine.create(engineOptions(small, 'kv_producer', 'prefill-reuse'));
    const d = await Engine.create(engineOptions(PAIR, 'kv_consumer', 'decode-reuse'));
    try {
      const { connector } = await runner(p);
      const loadErrors = countLoadErrors((await runner(d)).connector);
      const filled = new Set<number>();
      let refilledOrReallocated = 0;
      const realFilled = connector.kvBlocksFilled.bind(connector);
      connector.kvBlocksFilled = (ids) => {
        for (const b of ids) filled.add(b);
        realFilled(ids);
      };
      const realAllocated = connector.kvBlocksAllocated.bind(connector);
      connector.kvBlocksAllocated = (ids) => {
        for (const b of ids) if (filled.has(b)) refilledOrReallocated++;
        realAllocated(ids);
      };
      for (const [i, prompt] of prompts.entries()) {
        const dOut = await disaggregated(p, d, prompt);
        assert.deepEqual(dOut.tokenIds, expected[i], `request ${i}: D matches the single engine`);
      }
      assert.ok(refilledOrReallocated > 0, 'the pool gave recorded blocks to later requests');
      assert.equal(loadErrors(), 0, 'no READ met a stale checksum');
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});
