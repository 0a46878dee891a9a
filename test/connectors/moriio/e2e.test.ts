import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MoRIIOConnector } from '../../../src/connectors/moriio/index.ts';
import { LLM } from '../../../src/engine/llm.ts';
import type { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import { InThreadTransferAgent, ThreadedTransferAgent } from '../../../src/transfer/index.ts';
import { PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { moriioOptions, moriioPorts, type PairSpec, runPair } from './helpers.ts';

async function agentOf(llm: LLM) {
  const runner = ((await llm.engine()).engine.executor as LocalExecutor).runner;
  return (runner.connector as MoRIIOConnector).worker?.agent;
}

async function disaggregate(spec: PairSpec, warmProducer = false, transferThread?: boolean): Promise<void> {
  const expected = await plainOutputs();
  const pPorts = await moriioPorts();
  const dPorts = await moriioPorts();
  const extra = transferThread === undefined ? {} : { transfer_thread: transferThread };
  const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts, extra));
  const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts, extra));
  try {
    // transfer_thread defaults to true: the agent runs in its own worker thread.
    const agentClass = transferThread === false ? InThreadTransferAgent : ThreadedTransferAgent;
    assert.ok((await agentOf(p)) instanceof agentClass, `P's agent is ${agentClass.name}`);
    assert.ok((await agentOf(d)) instanceof agentClass, `D's agent is ${agentClass.name}`);
    // A producer prefix-cache hit must still send the cached blocks.
    if (warmProducer) await p.generate(PROMPTS, { maxTokens: 1, temperature: 0 });
    const { tokens, pParams } = await runPair(p, d, pPorts, dPorts, spec);
    assert.deepEqual(tokens, expected);
    for (const params of pParams) {
      assert.ok(params);
      assert.equal(params['do_remote_prefill'], true);
      assert.equal(params['remote_engine_id'], `127.0.0.1:${pPorts.handshakePort}`);
      assert.equal(params['remote_handshake_port'], pPorts.handshakePort);
      assert.equal(params['remote_notify_port'], pPorts.notifyPort);
      assert.match(String(params['transfer_id']), /^tx-/);
    }
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
    const dStats = (await d.engine()).engine.schedulerStats();
    assert.equal(dStats.kvCacheUsage, 0);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

for (const readMode of [false, true]) {
  for (const backend of ['rdma', 'xgmi'] as const) {
    describe(`MoRIIO ${readMode ? 'READ' : 'WRITE'} over ${backend}, two engines in one process`, () => {
      it('tiny: D equals a single engine token for token; both pools drain', () =>
        disaggregate({ readMode, backend }));
      it('tiny, P already holds the prompt in its prefix cache: still token-identical', () =>
        disaggregate({ readMode, backend }, true));
      it('transfer_thread false: the agent on the engine loop, still token-identical', () =>
        disaggregate({ readMode, backend }, false, false));
    });
  }
}
