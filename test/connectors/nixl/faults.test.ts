import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { LLM } from '../../../src/engine/llm.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { SideChannelServer } from '../../../src/transfer/index.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { agentFaults, withFaultConnectors } from '../helpers/fault-connectors.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

const base: PairOptions = { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' };

/** `faults`: both engines load fault-connectors.ts's classes (their agents take agentFaults). */
async function pair(o: PairOptions, faults = false) {
  const options = (role: 'kv_producer' | 'kv_consumer', engineId: string) => {
    const opts = engineOptions(o, role, engineId);
    return faults ? withFaultConnectors(opts) : opts;
  };
  const p = await LLM.create(options('kv_producer', 'prefill-engine'));
  const d = await LLM.create(options('kv_consumer', 'decode-engine'));
  return { p, d, close: () => Promise.all([p.shutdown(), d.shutdown()]) };
}

after(() => {
  agentFaults.outgoing = undefined;
});

describe('NIXL failure handling', () => {
  it('a lease that expires frees P at once, counts it, and a late READ becomes a load error on D', async () => {
    const { p, d, close } = await pair({ ...base, extra: { kv_lease_duration: 0.3 } });
    try {
      const [out] = await p.generate(
        PROMPTS[0]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      // Unrenewed, the 0.3 s lease frees the blocks; the bound leaves room for a loaded machine.
      const t0 = Date.now();
      await waitForEmptyPool(p, 10_000);
      assert.ok(Date.now() - t0 < 10_000, 'expiry is bounded by the lease');
      assert.equal((await p.engine()).stats().kvConnectorStats?.['num_kv_expired_reqs'], 1);
      const [late] = await d.generate(PROMPTS[0]!, GREEDY, { kvTransferParams: out!.kvTransferParams });
      assert.equal(
        late!.finishReason,
        'error',
        'a READ after expiry is refused, and policy=fail fails the request',
      );
      await waitForEmptyPool(d);
    } finally {
      await close();
    }
  });

  it('an aborted D request releases P immediately (bare notification), not at lease expiry', async () => {
    const { p, d, close } = await pair({ ...base, extra: { kv_lease_duration: 60 } });
    try {
      const [out] = await p.generate(
        PROMPTS[2]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      const engineD = await d.engine();
      const ac = new AbortController();
      ac.abort();
      const stream = engineD.generate(
        {
          requestId: 'aborted-1',
          prompt: PROMPTS[2]!,
          sampling: { ...GREEDY, topP: 1, topK: 0, seed: null, stop: [], stopTokenIds: [], logprobs: null },
          kvTransferParams: out!.kvTransferParams,
        },
        ac.signal,
      );
      for await (const _ of stream) {
        /* drain */
      }
      await waitForEmptyPool(p, 3000);
      await waitForEmptyPool(d);
    } finally {
      await close();
    }
  });

  it('a corrupted payload byte invalidates exactly those blocks: fail → error, recompute → correct output', async () => {
    const [expected] = await plainOutputs('tiny', [PROMPTS[2]!]);
    for (const policy of ['fail', 'recompute'] as const) {
      let armed = false;
      const corruptedBlocks: number[] = [];
      // P's agent serves the READ: the transform must exist when P's agent is created.
      agentFaults.outgoing = (view, run) => {
        if (!armed || run.region !== 1 || corruptedBlocks.length > 0) return view;
        corruptedBlocks.push(run.first);
        const copy = new Uint8Array(view);
        copy[copy.length - 1] = (copy[copy.length - 1] ?? 0) ^ 0xff;
        return copy;
      };
      const { p, d, close } = await pair({ ...base, policy }, true);
      agentFaults.outgoing = undefined;
      try {
        const [out] = await p.generate(
          PROMPTS[2]!,
          { ...GREEDY, maxTokens: 1 },
          { kvTransferParams: P_PARAMS },
        );
        armed = true;
        const [res] = await d.generate(PROMPTS[2]!, GREEDY, { kvTransferParams: out!.kvTransferParams });
        assert.equal(corruptedBlocks.length, 1, 'one chunk was corrupted');
        if (policy === 'fail') {
          assert.equal(res!.finishReason, 'error');
        } else {
          assert.deepEqual(res!.tokenIds, expected, 'recompute repairs the output');
          assert.ok(res!.metrics.numLocalComputedTokens > 1, 'D recomputed from the first invalid block');
          assert.ok(res!.metrics.numLocalComputedTokens < PROMPTS[2]!.length, 'blocks before it were kept');
        }
        await waitForEmptyPool(p);
        await waitForEmptyPool(d);
      } finally {
        await close();
      }
    }
  });

  it("a wrong compatibility hash fails the handshake with vLLM's text, and the policy decides", async () => {
    const { p, d, close } = await pair(base);
    const fake = new SideChannelServer({
      host: '127.0.0.1',
      port: 0,
      getMetadata: () => ({ compatibility_hash: 'not-the-same', connector_version: 7, agent_metadata: {} }),
    });
    const { port } = await fake.start();
    try {
      const [out] = await p.generate(
        PROMPTS[0]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      const params = { ...out!.kvTransferParams, remote_port: port };
      const { result, records } = await captureLogs(() =>
        d.generate(PROMPTS[0]!, GREEDY, { kvTransferParams: params }),
      );
      assert.equal(result[0]!.finishReason, 'error');
      const text = records.map((r) => r.message).join('\n');
      assert.match(text, /NIXL compatibility hash mismatch\. Local: [0-9a-f]{64}, Remote: not-the-same\./);
      assert.match(text, /identical configurations\.Disable this check/);
      assert.equal(
        (await d.engine()).stats().kvConnectorStats?.['num_failed_handshakes'],
        1,
        "counted as vLLM's num_failed_handshakes",
      );
      await waitForEmptyPool(d);
    } finally {
      await fake.close();
      await close();
    }
  });

  it('a peer that accepts but never answers is bounded by the handshake timeout: no hang, no leak', async () => {
    const { p, d, close } = await pair({
      ...base,
      consumerExtra: { handshake_timeout: 0.3 },
      policy: 'recompute',
    });
    const sockets = new Set<Socket>();
    const silent = createServer((s) => sockets.add(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const addr = silent.address();
    try {
      const [expected] = await plainOutputs('tiny', [PROMPTS[1]!]);
      const [out] = await p.generate(
        PROMPTS[1]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      const params = {
        ...out!.kvTransferParams,
        remote_port: typeof addr === 'object' && addr ? addr.port : 0,
      };
      const t0 = Date.now();
      const [res] = await d.generate(PROMPTS[1]!, GREEDY, { kvTransferParams: params });
      // Without the bound the request would wait on the silent peer for ever.
      assert.ok(Date.now() - t0 < 15_000, 'bounded by handshake_timeout');
      assert.deepEqual(res!.tokenIds, expected, 'policy=recompute computes locally');
      await waitForEmptyPool(d);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => silent.close(r));
      await close();
    }
  });
});
