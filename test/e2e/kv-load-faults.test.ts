/**
 * Injected KV-load faults on a real NixlConnector P/D pair (`kvconnect serve` processes, the
 * proxy in front): with `--kv-load-failure-rate 100` a decode server under
 * kv_load_failure_policy=recompute recomputes every prompt and answers the same token ids
 * as a plain engine, one under `fail` answers KV_LOAD_FAILED (relayed by the proxy after its
 * retries); a stall switched on through POST /admin/config holds the load for its duration
 * and the answer stays identical, with the KV loaded from P.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { readMetrics } from '../../src/demo/metrics.ts';
import { DEMO_DEFAULTS, type DemoOptions } from '../../src/demo/options.ts';
import { ProcessGroup, type ServeProcess, startServe } from '../../src/demo/processes.ts';
import { planTopology } from '../../src/demo/topology.ts';
import { familyPrefix } from '../../src/demo/workload.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/proxy-server.ts';
import { generatedTokenIds, postJson } from './helpers/cluster.ts';

setLogLevel('error');

const MAX_TOKENS = 8;

function body(model: string, i: number): Record<string, unknown> {
  return {
    model,
    prompt: `${familyPrefix(i, 500)}And the LORD said unto`,
    max_tokens: MAX_TOKENS,
    temperature: 0,
    logprobs: 0,
    return_tokens_as_token_ids: true,
  };
}

describe('injected KV-load faults on a NIXL P/D pair', () => {
  const group = new ProcessGroup();
  const proxies: RunningProxy[] = [];
  let model: string;
  let prefill: ServeProcess;
  let recompute: ServeProcess;
  let failing: ServeProcess;
  let viaRecompute: RunningProxy;
  let viaFailing: RunningProxy;

  before(async () => {
    const base: DemoOptions = { ...DEMO_DEFAULTS, connector: 'NixlConnector' };
    model = base.model;
    const r = await planTopology('NixlConnector', { ...base, kvLoadFailurePolicy: 'recompute' });
    const f = await planTopology('NixlConnector', { ...base, kvLoadFailurePolicy: 'fail' });
    const env = { KVCONNECT_LOG_LEVEL: 'error' };
    [prefill, recompute, failing] = await Promise.all([
      startServe('prefill', r.prefillArgs, { timeoutMs: 30_000, group, env }),
      startServe('decode-recompute', [...r.decodeArgs, '--kv-load-failure-rate', '100'], {
        timeoutMs: 30_000,
        group,
        env: { ...env, VLLM_SERVER_DEV_MODE: '1' },
      }),
      startServe('decode-fail', [...f.decodeArgs, '--kv-load-failure-rate', '100'], {
        timeoutMs: 30_000,
        group,
        env,
      }),
    ]);
    for (const decode of [recompute, failing]) {
      proxies.push(
        await startProxy(
          resolveProxyOptions({
            prefill: [prefill.url],
            decode: [decode.url],
            port: 0,
            kvConnector: 'NixlConnector',
          }),
        ),
      );
    }
    [viaRecompute, viaFailing] = proxies as [RunningProxy, RunningProxy];
  });

  after(async () => {
    for (const p of proxies) await p.close();
    await group.stopAll();
  });

  /** Token ids of the plain answer (P without kv_transfer_params is a plain engine). */
  async function plain(i: number): Promise<number[]> {
    const res = await postJson(`${prefill.url}/v1/completions`, body(model, i));
    assert.equal(res.status, 200);
    return generatedTokenIds(res, false);
  }

  it('policy recompute: every load fails, D recomputes, the token ids are the plain ones', async () => {
    const before = await readMetrics(recompute.url);
    for (const i of [0, 1]) {
      const res = await postJson(`${viaRecompute.url}/v1/completions`, body(model, i));
      assert.equal(res.status, 200, await res.clone().text());
      assert.deepEqual(await generatedTokenIds(res, false), await plain(i), `prompt ${i}`);
    }
    const after = await readMetrics(recompute.url);
    // D computed (almost) whole prompts itself: the loaded KV was thrown away.
    assert.ok(
      after.promptTokens - before.promptTokens > 2 * 100,
      `D computed ${after.promptTokens - before.promptTokens} tokens`,
    );
  });

  it('policy fail: D answers KV_LOAD_FAILED, relayed by the proxy', async () => {
    const res = await postJson(`${viaFailing.url}/v1/completions`, body(model, 2));
    const text = await res.text();
    assert.equal(res.status, 500, text);
    const err = (JSON.parse(text) as { error: { kvconnect_code: string; message: string } }).error;
    assert.equal(err.kvconnect_code, 'KV_LOAD_FAILED', text);
    assert.match(err.message, /kv_load_failure_policy=fail/);
  });

  it('a stall set through /admin/config holds the load, then D decodes from the loaded KV', async () => {
    const set = await postJson(`${recompute.url}/admin/config`, {
      'kv-load-failure-rate': 0,
      'kv-load-stall-rate': 100,
      'kv-load-stall-duration': '1200ms',
    });
    assert.equal(set.status, 200, await set.clone().text());
    const before = await readMetrics(recompute.url);
    const t0 = performance.now();
    const res = await postJson(`${viaRecompute.url}/v1/completions`, body(model, 3));
    const elapsed = performance.now() - t0;
    assert.equal(res.status, 200);
    assert.deepEqual(await generatedTokenIds(res, false), await plain(3));
    assert.ok(elapsed >= 1200, `answered after ${elapsed.toFixed(0)} ms, before the stall ended`);
    const after = await readMetrics(recompute.url);
    assert.ok(after.promptTokens - before.promptTokens <= 1, 'D computed only the last prompt token');
    assert.ok(after.externalHits - before.externalHits > 100, 'D loaded the prompt from P');
  });
});
