/**
 * Where the NIXL connectors' transfer agent runs: in a worker thread by default
 * (kv_connector_extra_config.transfer_thread), on the engine's event loop with `false`.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { describe, it } from 'node:test';
import { parseNixlOptions } from '../../../src/connectors/nixl/config.ts';
import type { NixlConnector } from '../../../src/connectors/nixl/index.ts';
import { LLM } from '../../../src/engine/llm.ts';
import type { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import { isKVError } from '../../../src/errors/index.ts';
import { InThreadTransferAgent, ThreadedTransferAgent } from '../../../src/transfer/index.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

async function agentOf(llm: LLM) {
  const runner = ((await llm.engine()).engine.executor as LocalExecutor).runner;
  return (runner.connector as NixlConnector).worker?.agent;
}

async function disaggregate(o: PairOptions): Promise<void> {
  const expected = await plainOutputs(o.model);
  const p = await LLM.create(engineOptions(o, 'kv_producer', 'prefill-engine'));
  const d = await LLM.create(engineOptions(o, 'kv_consumer', 'decode-engine'));
  try {
    const threaded = o.extra?.['transfer_thread'] !== false;
    const agentClass = threaded ? ThreadedTransferAgent : InThreadTransferAgent;
    assert.ok((await agentOf(p)) instanceof agentClass, `P's agent is ${agentClass.name}`);
    assert.ok((await agentOf(d)) instanceof agentClass, `D's agent is ${agentClass.name}`);
    // vLLM's num_threads (default 4) is the agents' copy threads, capped at the cores.
    const copyThreads = Math.min(Number(o.extra?.['num_threads'] ?? 4), availableParallelism());
    assert.equal((await agentOf(p))?.copyThreads, copyThreads);
    assert.equal((await agentOf(d))?.copyThreads, copyThreads);
    // busy_poll_us reaches the agents (else the agent's default: 100 µs on the loop, 0 in a thread).
    const busyPollUs = Number(
      o.extra?.['busy_poll_us'] ?? process.env['KVCONNECT_BUSY_POLL_US'] ?? (threaded ? 0 : 100),
    );
    assert.equal((await agentOf(p))?.busyPollUs, busyPollUs);
    assert.equal((await agentOf(d))?.busyPollUs, busyPollUs);
    const pOut = await p.generate(PROMPTS, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
    const dOut = await d.generate(PROMPTS, GREEDY, { kvTransferParams: pOut.map((x) => x.kvTransferParams) });
    assert.deepEqual(
      dOut.map((x) => x.tokenIds),
      expected,
    );
    for (const out of dOut) {
      assert.ok(
        out.metrics.numLocalComputedTokens <= 1,
        `D computed ${out.metrics.numLocalComputedTokens} prompt tokens`,
      );
      assert.ok(out.metrics.numExternalTokens > 0);
    }
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
    const poster = o.connector === 'NixlPushConnector' ? p : d;
    const stats = (await poster.engine()).stats().kvConnectorStats;
    assert.ok(stats, 'NIXL stats are reported from the thread');
    assert.equal((stats['bytes_transferred'] as number[]).length, PROMPTS.length);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

describe('NIXL transfer agent in a thread (default) or on the engine loop', () => {
  for (const backend of ['TCP', 'SHM'] as const) {
    it(`pull over ${backend}, agent in a thread: D's tokens equal a single engine's and both pools drain`, () =>
      disaggregate({ model: 'tiny', connector: 'NixlConnector', backend, extra: {} }));
    it(`pull over ${backend}, transfer_thread false, busy_poll_us 0: the same on the engine loop`, () =>
      disaggregate({
        model: 'tiny',
        connector: 'NixlConnector',
        backend,
        extra: { transfer_thread: false, busy_poll_us: 0 },
      }));
  }

  it('push over TCP, agent in a thread, num_threads 1, busy_poll_us 250: D receives the KV written by P', () =>
    disaggregate({
      model: 'tiny',
      connector: 'NixlPushConnector',
      backend: 'TCP',
      extra: { num_threads: 1, busy_poll_us: 250 },
    }));

  it('the option defaults to true and must be a boolean', () => {
    assert.equal(parseNixlOptions({}, null, {}).transferThread, true);
    assert.equal(parseNixlOptions({ transfer_thread: false }, null, {}).transferThread, false);
    assert.equal(parseNixlOptions({ transfer_thread: true }, null, {}).transferThread, true);
    assert.throws(
      () => parseNixlOptions({ transfer_thread: 'yes' }, null, {}),
      (e: unknown) => isKVError(e) && e.code === 'NIXL_BAD_EXTRA_CONFIG',
    );
  });
});
