/**
 * A NIXL prefill engine that goes silent while its decode engine reads: a network partition
 * after the handshake (the fault relay drops everything), and a real P process stopped with
 * SIGSTOP in the middle of a data frame. The load fails within `transfer_timeout` per
 * `kv_load_failure_policy`, the decode engine keeps stepping other requests meanwhile, both
 * block pools drain (P's by its lease or D's release notification), and once the fault is
 * gone the next hand-off works and is token-identical to a single engine.
 */
import assert from 'node:assert/strict';
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../src/engine/llm.ts';
import { engineOptions, P_PARAMS } from '../connectors/nixl/helpers.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../helpers/llm.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { relayedPeer } from './helpers/relayed-peer.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
const TRANSFER_TIMEOUT_S = 1.5;
/** Slack for a loaded 2-core machine on top of the documented bound. */
const SLACK_MS = 4000;

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function decodeEngine(id: string, policy: 'fail' | 'recompute') {
  return LLM.create(
    engineOptions(
      {
        model: 'tiny',
        connector: 'NixlConnector',
        backend: 'TCP',
        policy,
        extra: { transfer_timeout: TRANSFER_TIMEOUT_S, handshake_timeout: 2 },
      },
      'kv_consumer',
      id,
    ),
  );
}

/** Runs a local request on `d` and the time it finished. */
async function localRequest(d: LLM): Promise<{ tokens: number[]; doneAt: number }> {
  const [out] = await d.generate('while the transfer stalls', { ...GREEDY, maxTokens: 4 });
  return { tokens: out!.tokenIds, doneAt: performance.now() };
}

describe('NIXL with a prefill engine that goes silent mid-transfer', () => {
  it('a partition after the handshake (bytes held both ways): recompute within transfer_timeout, other requests keep going, both pools drain', async () => {
    const prompts = [PROMPTS[0]!, PROMPTS[2]!, PROMPTS[1]!];
    const expected = await plainOutputs('tiny', prompts);
    const p = await LLM.create(
      engineOptions(
        { model: 'tiny', connector: 'NixlConnector', backend: 'TCP', extra: { kv_lease_duration: 2 } },
        'kv_producer',
        'stall-prefill',
      ),
    );
    cleanups.push(() => p.shutdown());
    const d = await decodeEngine('stall-decode', 'recompute');
    cleanups.push(() => d.shutdown());
    const prefill = async (prompt: string) =>
      (await p.generate(prompt, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS }))[0]!
        .kvTransferParams!;

    const first = await prefill(prompts[0]!);
    const peer = await relayedPeer(first);
    cleanups.push(() => peer.close());
    const [warm] = await d.generate(prompts[0]!, GREEDY, { kvTransferParams: peer.route(first) });
    assert.deepEqual(warm!.tokenIds, expected[0], 'through the relay before the fault');
    assert.ok(warm!.metrics.numLocalComputedTokens <= 1, 'the KV came from P');

    const second = await prefill(prompts[1]!);
    peer.relay.set('both', 'hold'); // TCP-like: bytes wait, nothing is lost
    const t0 = performance.now();
    const stalled = d.generate(prompts[1]!, GREEDY, { kvTransferParams: peer.route(second) });
    const local = await localRequest(d);
    const [out] = await stalled;
    const doneAt = performance.now();
    assert.ok(local.doneAt < doneAt, 'a local request finished while the transfer was stalled');
    assert.ok(
      doneAt - t0 < TRANSFER_TIMEOUT_S * 1000 + SLACK_MS,
      `the load failed after ${(doneAt - t0).toFixed(0)} ms`,
    );
    assert.deepEqual(out!.tokenIds, expected[1], 'policy=recompute gives the single-engine tokens');
    assert.ok(out!.metrics.numLocalComputedTokens > 1, 'D recomputed the prompt');
    await waitForEmptyPool(d);
    // D's release cannot cross the partition: P's lease frees the blocks.
    await waitForEmptyPool(p, 2000 + SLACK_MS);
    assert.equal((await p.engine()).stats().kvConnectorStats?.['num_kv_expired_reqs'], 1);

    peer.relay.set('both', 'flow');
    const third = await prefill(prompts[2]!);
    const [healed] = await d.generate(prompts[2]!, GREEDY, { kvTransferParams: peer.route(third) });
    assert.deepEqual(healed!.tokenIds, expected[2]);
    assert.ok(healed!.metrics.numLocalComputedTokens <= 1, 'after the partition the KV comes from P again');
    assert.ok(peer.relay.connections >= 2, 'the dead connection was replaced by a new one');
    await waitForEmptyPool(p, 2000 + SLACK_MS);
  });

  it('P stopped with SIGSTOP in the middle of a data frame: fail within transfer_timeout; after SIGCONT, P frees its blocks', async () => {
    const prompt = PROMPTS[2]!;
    const child: ChildProcessByStdio<Writable, Readable, null> = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(here, '..', 'connectors', 'nixl', 'fixtures', 'producer.ts'),
        JSON.stringify([prompt]),
        'tiny',
        JSON.stringify({ kv_lease_duration: 4 }),
      ],
      { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, KVCONNECT_LOG_LEVEL: 'error' } },
    );
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
      }
    });
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const nextLine = async (): Promise<string> => {
      const l = await lines.next();
      if (l.done) throw new Error('the producer ended early');
      return l.value;
    };
    const usage = async (): Promise<number> => {
      child.stdin.write('usage\n');
      return Number(await nextLine());
    };
    const [params] = JSON.parse(await nextLine()) as Record<string, unknown>[];
    let stopped = false;
    const peer = await relayedPeer(params!, (dir, h, payload) => {
      if (stopped || dir !== 'down' || h.type !== 'data') return { action: 'forward' };
      stopped = true;
      child.kill('SIGSTOP');
      return { action: 'hold', forwardBytes: Math.floor((payload?.length ?? 0) / 2) };
    });
    cleanups.push(() => peer.close());
    const d = await decodeEngine('sigstop-decode', 'fail');
    cleanups.push(() => d.shutdown());

    const t0 = performance.now();
    const stalled = d.generate(prompt, GREEDY, { kvTransferParams: peer.route(params!) });
    await waitUntil('the first data frame (P stopped)', () => stopped);
    const local = await localRequest(d);
    const [out] = await stalled;
    const doneAt = performance.now();
    assert.ok(local.doneAt < doneAt, 'a local request finished while P was stopped');
    assert.equal(out!.finishReason, 'error', 'policy=fail ends the request with an error');
    assert.deepEqual(out!.tokenIds, []);
    assert.ok(
      doneAt - t0 < TRANSFER_TIMEOUT_S * 1000 + SLACK_MS,
      `the load failed after ${(doneAt - t0).toFixed(0)} ms`,
    );
    await waitForEmptyPool(d);

    child.kill('SIGCONT');
    // D's release notification (over a fresh connection) or else P's lease frees the blocks.
    await waitUntil('P to free the stalled request', async () => (await usage()) === 0, {
      timeoutMs: 4000 + SLACK_MS,
      intervalMs: 100,
    });
    child.stdin.write('exit\n');
  });
});
