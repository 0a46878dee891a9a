/**
 * Write tracking with MoRIIO in READ mode (docs/connector-api.md#write-tracking): P's worker
 * records the checksums of the blocks each forward pass fills, and its grant sends them. A
 * block changed right after the forward pass filled it fails D's check, and D recomputes
 * (hashing at grant time would have vouched for the changed bytes). The NIXL side of the
 * same contract is in nixl-write-tracking.test.ts.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { it } from 'node:test';
import type { MoRIIOConnector } from '../../../src/connectors/moriio/index.ts';
import { LLM as Engine } from '../../../src/engine/llm.ts';
import { plainOutputs } from '../../helpers/llm.ts';
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
