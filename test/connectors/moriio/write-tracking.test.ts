/**
 * Write tracking with MoRIIO in READ mode (docs/connector-api.md#write-tracking): P's worker
 * records the checksums of the blocks each forward pass fills, and its grant sends them. A
 * block changed right after the forward pass filled it fails D's check, and D recomputes
 * (hashing at grant time would have vouched for the changed bytes). The NIXL side of the
 * same contract is in nixl-write-tracking.test.ts. In WRITE mode P records the full blocks of
 * the layers it pushes as it pushes them, and a same-host D pulls those pushes from P's KV.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { it } from 'node:test';
import type { MoRIIOConnector } from '../../../src/connectors/moriio/index.ts';
import { LLM as Engine } from '../../../src/engine/llm.ts';
import { plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { changeAfterFill, countLoadErrors, runner } from '../helpers/write-tracking.ts';
import { moriioOptions, moriioPorts, type PairSpec, runPair } from './helpers.ts';

const PROMPT =
  'Disaggregated prefill moves the KV cache of a long prompt from one engine to another engine directly.';

it('MoRIIO READ mode: KV changed after the forward pass filled it fails D’s check; D recomputes and matches', async () => {
  const spec: PairSpec = { readMode: true, backend: 'rdma', policy: 'recompute' };
  const [expected] = await plainOutputs('tiny', [PROMPT]);
  const pPorts = await moriioPorts();
  const dPorts = await moriioPorts();
  // In-thread agents: the record is taken inside kvBlocksFilled, before the change below.
  const p = await Engine.create(
    moriioOptions(spec, 'kv_producer', pPorts, { transfer_thread: false, num_workers: 2, busy_poll_us: 0 }),
  );
  const d = await Engine.create(moriioOptions(spec, 'kv_consumer', dPorts, { transfer_thread: false }));
  try {
    const { kv, connector } = await runner(p);
    // num_workers (default 1) is the agent's copy threads, capped at the cores.
    const agentOf = (c: unknown) => (c as MoRIIOConnector).worker?.agent;
    assert.equal(agentOf(connector)?.copyThreads, Math.min(2, availableParallelism()));
    assert.equal(agentOf((await runner(d)).connector)?.copyThreads, 1);
    // busy_poll_us reaches the agent; unset, the agent's default (no KVCONNECT_BUSY_POLL_US in tests).
    assert.equal(agentOf(connector)?.busyPollUs, 0);
    assert.equal(
      agentOf((await runner(d)).connector)?.busyPollUs,
      Number(process.env['KVCONNECT_BUSY_POLL_US'] ?? 100),
    );
    const changed = changeAfterFill(connector, kv, 9);
    const loadErrors = countLoadErrors((await runner(d)).connector);
    const { tokens } = await runPair(p, d, pPorts, dPorts, spec, [PROMPT]);
    assert.ok(changed() > 0, 'the prefill filled blocks');
    assert.ok(loadErrors() > 0, "D's READ failed its checksum check");
    assert.deepEqual(tokens, [expected], 'D recomputed instead of decoding from the changed KV');
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
});

it('MoRIIO WRITE mode over xgmi: one push of recorded full blocks, pulled by D, and no event-loop turn between layers; a partial last block is sent hashed; tokens match', async () => {
  const spec: PairSpec = { readMode: false, backend: 'xgmi' };
  const pPorts = await moriioPorts();
  const dPorts = await moriioPorts();
  const p = await Engine.create(moriioOptions(spec, 'kv_producer', pPorts));
  const d = await Engine.create(moriioOptions(spec, 'kv_consumer', dPorts));
  try {
    const { connector } = await runner(p);
    const agent = (connector as MoRIIOConnector).worker?.agent;
    assert.ok(agent);
    const [group] = (await p.engine()).engine.kvCacheConfig.groups;
    assert.ok(group);
    const bs = group.spec.blockSize;
    // The forward pass goes on from layer to layer without letting the event loop turn: the
    // threaded agent needs no turn, and tiny's layers are pushed together after the last one.
    let layerCalls = 0;
    let turns = 0;
    const saveKvLayer = connector.saveKvLayer.bind(connector);
    connector.saveKvLayer = async (layerName, ctx) => {
      layerCalls++;
      let turned = false;
      const probe = setImmediate(() => {
        turned = true;
      });
      await saveKvLayer(layerName, ctx);
      clearImmediate(probe);
      if (turned) turns++;
    };
    // Two full blocks: every layer's push is of recorded blocks, so D copies it itself.
    const full = { promptTokenIds: Array.from({ length: 2 * bs }, (_, i) => 10 + ((i * 7) % 90)) };
    // A partial last block is hashed as it is sent (it could still change): pushed, not pulled.
    const partial = { promptTokenIds: Array.from({ length: 2 * bs + 5 }, (_, i) => 12 + ((i * 5) % 80)) };
    const expected = await plainOutputs('tiny', [full, partial] as never);
    // The connector drains the agent's stats every step: count the pulled WRITEs as it does.
    let drained = 0;
    const reset = agent.resetStats.bind(agent);
    agent.resetStats = () => {
      const snapshot = reset();
      drained += snapshot.numPulledWrites;
      return snapshot;
    };
    const pulled = () => drained + agent.getStats().numPulledWrites;
    const first = await runPair(p, d, pPorts, dPorts, spec, [full] as never);
    // write_done left only after every layer's WRITE ended, so their stats are in.
    await waitUntil('a pulled WRITE counted', () => pulled() >= 1);
    // One WRITE of every layer, after the forward pass.
    const pulledFull = pulled();
    assert.equal(pulledFull, 1, 'one pulled WRITE per request');
    assert.ok(layerCalls > 0, 'saveKvLayer ran');
    assert.equal(turns, 0, 'no event-loop turn between layers');
    const second = await runPair(p, d, pPorts, dPorts, spec, [partial] as never);
    assert.deepEqual([...first.tokens, ...second.tokens], expected);
    await waitForEmptyPool(p);
    assert.equal(pulled(), pulledFull, 'a WRITE with a partial block is sent, never pulled');
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
});
