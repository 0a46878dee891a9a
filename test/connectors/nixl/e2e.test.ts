import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LLM } from '../../../src/engine/llm.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

async function disaggregate(o: PairOptions): Promise<void> {
  const expected = await plainOutputs(o.model);
  const p = await LLM.create(engineOptions(o, 'kv_producer', 'prefill-engine'));
  const d = await LLM.create(engineOptions(o, 'kv_consumer', 'decode-engine'));
  try {
    const pOut = await p.generate(PROMPTS, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
    for (const out of pOut) {
      const params = out.kvTransferParams;
      assert.ok(params, 'the producer returns kv_transfer_params');
      assert.equal(params['do_remote_prefill'], true);
      assert.equal(params['transfer_mode'], o.connector === 'NixlPushConnector' ? 'push' : 'pull');
      assert.equal(params['remote_engine_id'], 'prefill-engine');
      assert.equal(params['remote_request_id'], out.requestId);
      assert.equal(params['remote_host'], '127.0.0.1');
      assert.equal(
        (params['remote_block_ids'] as number[][]).length,
        (await p.engine()).engine.kvCacheConfig.groups.length,
      );
    }
    const dOut = await d.generate(PROMPTS, GREEDY, { kvTransferParams: pOut.map((x) => x.kvTransferParams) });
    assert.deepEqual(
      dOut.map((x) => x.tokenIds),
      expected,
    );
    for (const out of dOut) {
      assert.equal(out.finishReason, 'length');
      assert.ok(
        out.metrics.numLocalComputedTokens <= 1,
        `D computed ${out.metrics.numLocalComputedTokens} prompt tokens`,
      );
      assert.ok(out.metrics.numExternalTokens > 0);
    }
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
    // The side that posts the transfers records them: D reads (pull), P writes (push).
    const poster = o.connector === 'NixlPushConnector' ? p : d;
    const stats = (await poster.engine()).stats().kvConnectorStats;
    assert.ok(stats, 'NIXL stats are reported');
    assert.equal((stats['bytes_transferred'] as number[]).length, PROMPTS.length);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

for (const connector of ['NixlConnector', 'NixlPushConnector'] as const) {
  for (const backend of ['TCP', 'SHM'] as const) {
    describe(`${connector} over ${backend}, two engines in one process`, () => {
      for (const model of ['tiny', 'tiny-hybrid']) {
        it(`${model}: D's outputs equal a single engine's; D computes ≤ 1 prompt token; pools drain`, () =>
          disaggregate({ model, connector, backend }));
      }
    });
  }
}
