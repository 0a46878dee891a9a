/**
 * The pull race: P's answer (kv_transfer_params) names blocks D reads. P grants them in the
 * step that finished the request, before the answer leaves; a READ that still arrives before
 * its grant (here: P's worker is made to hold its hand-offs, and P's engine is stepped by
 * hand) waits for it or is refused and retried.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KVTransferParams } from '../../../src/connector/types.ts';
import { effectiveGrantWaitMs, parseNixlOptions } from '../../../src/connectors/nixl/config.ts';
import type { NixlConnector } from '../../../src/connectors/nixl/index.ts';
import type { NixlStepMetadata, SendJob } from '../../../src/connectors/nixl/step-metadata.ts';
import { Engine } from '../../../src/engine/engine.ts';
import { LLM, samplingParams } from '../../../src/engine/llm.ts';
import type { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import type { TransferAgent } from '../../../src/transfer/index.ts';
import { GREEDY, PROMPTS, plainOutputs } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

const base: PairOptions = { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' };

/** P as a bare engine whose steps the test drives; D as a normal, self-stepping LLM. */
async function heldPair(o: PairOptions) {
  const { kvTransferConfig, ...rest } = engineOptions(o, 'kv_producer', 'prefill-engine');
  const p = await Engine.create({ ...rest, kv_transfer_config: kvTransferConfig ?? null });
  const d = await LLM.create(engineOptions(o, 'kv_consumer', 'decode-engine'));
  const runner = (p.executor as LocalExecutor).runner;
  const worker = (runner.connector as NixlConnector).worker!;
  const agent = worker.agent as TransferAgent;
  return { p, d, agent, worker, close: () => Promise.all([p.shutdown(), d.shutdown()]) };
}

/** P's worker keeps the finished requests it is handed (no grant) until release(); its next step grants them. */
function holdGrants(worker: { startLoadKv(meta: NixlStepMetadata): void }): { release(): void } {
  const start = worker.startLoadKv.bind(worker);
  const held: SendJob[] = [];
  let holding = true;
  worker.startLoadKv = (meta) => {
    const sends = [...held.splice(0), ...(meta.reqsToSend ?? [])];
    if (holding) held.push(...sends);
    start({ ...meta, reqsToSend: holding ? [] : sends });
  };
  return {
    release: () => {
      holding = false;
    },
  };
}

/** Steps P until the request finished; returns its kv_transfer_params. */
async function prefillOnP(p: Engine, prompt: string, requestId = newId()): Promise<KVTransferParams> {
  p.addRequest({
    requestId,
    prompt,
    sampling: samplingParams({ ...GREEDY, maxTokens: 1 }),
    kvTransferParams: P_PARAMS,
  });
  for (let i = 0; i < 50; i++) {
    for (const delta of (await p.step()).deltas) {
      if (delta.finished) {
        assert.ok(delta.kvTransferParams, 'P answered with kv_transfer_params');
        return delta.kvTransferParams;
      }
    }
  }
  return assert.fail('P did not finish the prefill');
}

/** Steps P (its transfers progress) until its hand-off is done and its pool is empty. */
async function drainP(p: Engine, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (p.hasWork()) {
    if (Date.now() > deadline) assert.fail('P still holds blocks');
    await p.step();
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(p.schedulerStats().kvCacheUsage, 0);
}

function newId(): string {
  return `race-${Math.random().toString(16).slice(2, 10)}`;
}

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Sums D's failed transfers over the stats snapshots taken so far. */
function failedCounter(d: LLM): () => Promise<number> {
  let failed = 0;
  return async () => {
    const stats = (await d.engine()).stats().kvConnectorStats;
    failed += Number(stats?.['num_failed_transfers'] ?? 0);
    return failed;
  };
}

describe('NIXL pull: P grants in the step that finished the prefill', () => {
  it('the grant exists when the answer leaves; D loads while P never steps again', async () => {
    const [plain] = await plainOutputs('tiny', [PROMPTS[2]!]);
    // P refuses a READ without a grant at once: a late grant shows as a failed transfer.
    const { p, d, agent, close } = await heldPair({ ...base, extra: { grant_wait_ms: 0 } });
    try {
      const granted = new Set<string>();
      const grantRead = agent.grantRead.bind(agent);
      agent.grantRead = (key, spec) => {
        granted.add(key);
        grantRead(key, spec);
      };
      const id = newId();
      const params = await prefillOnP(p, PROMPTS[2]!, id);
      assert.ok(granted.has(id), 'P granted the blocks before the step that answered returned');
      const failed = failedCounter(d);
      let settled = false;
      const loaded = d.generate(PROMPTS[2]!, GREEDY, { kvTransferParams: params });
      loaded.finally(() => {
        settled = true;
      });
      await until(async () => settled || (await failed()) > 0, 'D to load or fail', 20_000);
      assert.equal(await failed(), 0, 'no READ was refused for want of a grant');
      const [out] = await loaded;
      assert.equal(out!.finishReason, 'length', JSON.stringify(out));
      assert.deepEqual(out!.tokenIds, plain);
      await drainP(p);
    } finally {
      await close();
    }
  });
});

describe('NIXL pull: D reads before P created the read grant', () => {
  it('P holds the READ until its next step creates the grant; D loads with no failure', async () => {
    const [plain] = await plainOutputs('tiny', [PROMPTS[2]!]);
    // A long grant wait: however slowly this machine runs, the READ cannot give up while P idles.
    const { p, d, agent, worker, close } = await heldPair({ ...base, extra: { grant_wait_ms: 15_000 } });
    try {
      const grants = holdGrants(worker);
      const params = await prefillOnP(p, PROMPTS[2]!);
      const failed = failedCounter(d);
      const loaded = d.generate(PROMPTS[2]!, GREEDY, { kvTransferParams: params });
      let settled = false;
      const settle = () => {
        settled = true;
      };
      loaded.then(settle, settle);
      await until(() => agent.waitingReads === 1 || settled, "D's READ to reach P", 20_000);
      assert.equal(settled, false, 'D finished before P created the grant: its READ was refused');
      assert.equal(agent.waitingReads, 1, 'the READ waits on P, which does not step');
      grants.release();
      const stepping = drainP(p);
      const [out] = await loaded;
      await stepping;
      assert.equal(out!.finishReason, 'length', JSON.stringify(out));
      assert.deepEqual(out!.tokenIds, plain);
      assert.equal(await failed(), 0, 'no transfer failed');
      const stats = (await d.engine()).stats();
      assert.ok(stats.externalPrefixCacheHitsTotal > 0, 'D loaded the prompt from P');
    } finally {
      await close();
    }
  });

  it('when P refuses at once (grant_wait_ms 0), D retries within the lease and loads', async () => {
    const [plain] = await plainOutputs('tiny', [PROMPTS[0]!]);
    const { p, d, agent, worker, close } = await heldPair({ ...base, extra: { grant_wait_ms: 0 } });
    try {
      const grants = holdGrants(worker);
      const params = await prefillOnP(p, PROMPTS[0]!);
      const failed = failedCounter(d);
      const loaded = d.generate(PROMPTS[0]!, GREEDY, { kvTransferParams: params });
      await until(async () => (await failed()) >= 1, 'P to refuse the first READ');
      assert.equal(agent.waitingReads, 0);
      grants.release();
      const stepping = drainP(p);
      const [out] = await loaded;
      await stepping;
      assert.equal(out!.finishReason, 'length', JSON.stringify(out));
      assert.deepEqual(out!.tokenIds, plain);
    } finally {
      await close();
    }
  });

  it('a READ after the lease expired is refused at once and not retried', async () => {
    // With a 10 s grant wait, a READ that waited for a grant would take 10 s, one refused at once not.
    const { p, d, close } = await heldPair({
      ...base,
      extra: { kv_lease_duration: 0.2, grant_wait_ms: 10_000 },
    });
    try {
      const params = await prefillOnP(p, PROMPTS[1]!);
      await drainP(p); // steps until the 0.2 s lease expired and P freed the blocks
      const failed = failedCounter(d);
      const started = Date.now();
      const [out] = await d.generate(PROMPTS[1]!, GREEDY, { kvTransferParams: params });
      assert.equal(out!.finishReason, 'error', 'policy fail: the load error fails the request');
      assert.ok(
        Date.now() - started < 10_000,
        `took ${Date.now() - started} ms: the READ waited for a grant`,
      );
      assert.equal(await failed(), 1, 'exactly one READ was posted and refused');
    } finally {
      await close();
    }
  });
});

describe('grant_wait_ms', () => {
  it('defaults to 5000 ms, is capped at half the transfer timeout, and must be ≥ 0', () => {
    const def = parseNixlOptions({}, null, {});
    assert.equal(def.grantWaitMs, 5000);
    assert.equal(effectiveGrantWaitMs(def), 5000);
    assert.equal(effectiveGrantWaitMs(parseNixlOptions({ grant_wait_ms: '250' }, null, {})), 250);
    assert.equal(effectiveGrantWaitMs(parseNixlOptions({ grant_wait_ms: 0 }, null, {})), 0);
    assert.equal(effectiveGrantWaitMs(parseNixlOptions({ transfer_timeout: 4 }, null, {})), 2000);
    assert.throws(
      () => parseNixlOptions({ grant_wait_ms: -1 }, null, {}),
      /kv_connector_extra_config\.grant_wait_ms: expected a number >= 0, received -1/,
    );
  });
});
