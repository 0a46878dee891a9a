/**
 * Process deaths during a NIXL hand-off, with real processes and SIGKILL:
 *  - P killed mid-transfer (frozen while serving D's READ): D's load fails within a bounded
 *    time; kv_load_failure_policy=fail ends the request with an error, recompute yields the
 *    plain engine's tokens; D's pool returns to empty.
 *  - D killed before reading (its worker never reads; it heartbeats P): P's
 *    lease, kept alive by the heartbeats, runs out once D is gone and P's pool empties.
 */
import assert from 'node:assert/strict';
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../../src/engine/llm.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS } from './helpers.ts';

const here = path.dirname(fileURLToPath(import.meta.url));
/** Long, so a failure seen well before it comes from the lost connection, not from a timeout. */
const TRANSFER_TIMEOUT_S = 30;

interface Child {
  proc: ChildProcessByStdio<Writable, Readable, null>;
  next(): Promise<string>;
  kill(): Promise<void>;
}

const children = new Set<Child>();
after(async () => {
  for (const c of children) await c.kill();
});

function start(fixture: string, args: string[]): Child {
  const proc = spawn(process.execPath, ['--import', 'tsx', path.join(here, 'fixtures', fixture), ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const child: Child = {
    proc,
    next: async () => {
      const line = await lines.next();
      if (line.done) throw new Error(`${fixture} ended before printing the expected line`);
      return line.value;
    },
    kill: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
      children.delete(child);
    },
  };
  children.add(child);
  return child;
}

describe('NIXL with a process killed during the hand-off', () => {
  for (const policy of ['fail', 'recompute'] as const) {
    it(`P killed mid-transfer: D's load fails within a bounded time; policy=${policy}; D's pool drains`, async () => {
      const prompt = PROMPTS[policy === 'fail' ? 0 : 2]!;
      const expected = policy === 'recompute' ? (await plainOutputs('tiny', [prompt]))[0] : null;
      const p = start('kill-producer.ts', [JSON.stringify([prompt])]);
      const d = await LLM.create(
        engineOptions(
          {
            model: 'tiny',
            connector: 'NixlConnector',
            backend: 'TCP',
            policy,
            extra: { transfer_timeout: TRANSFER_TIMEOUT_S },
          },
          'kv_consumer',
          `kill-decode-${policy}`,
        ),
      );
      try {
        const [params] = JSON.parse(await p.next()) as Record<string, unknown>[];
        const result = d.generate(prompt, GREEDY, { kvTransferParams: params! });
        assert.equal(await p.next(), 'serving', 'P started serving the READ and froze');
        await p.kill();
        const killedAt = Date.now();
        const [out] = await result;
        const elapsed = Date.now() - killedAt;
        // The lost connection fails the READ at once, long before transfer_timeout.
        assert.ok(elapsed < (TRANSFER_TIMEOUT_S * 1000) / 3, `D settled ${elapsed} ms after the kill`);
        if (policy === 'fail') {
          assert.equal(out!.finishReason, 'error');
          assert.ok(out!.tokenIds.length === 0, 'no tokens from a failed load');
        } else {
          assert.deepEqual(out!.tokenIds, expected, 'recompute after P died gives the plain tokens');
          assert.ok(out!.metrics.numLocalComputedTokens > 1, 'D recomputed the prompt');
        }
        await waitForEmptyPool(d);
      } finally {
        await p.kill();
        await d.shutdown();
      }
    });
  }

  it("D killed before reading: P's lease, renewed by D's heartbeats, expires and P's pool drains", async () => {
    // Heartbeats every lease/6 = 0.5 s, each renewing to now + 2 s: a loaded machine that delays
    // D by a second still keeps the lease alive.
    const leaseSeconds = 3;
    const d = start('kill-consumer.ts', [String(leaseSeconds)]);
    const p = await LLM.create(
      engineOptions(
        {
          model: 'tiny',
          connector: 'NixlConnector',
          backend: 'TCP',
          extra: { kv_lease_duration: leaseSeconds },
        },
        'kv_producer',
        'kill-prefill-lease',
      ),
    );
    try {
      assert.equal(await d.next(), 'ready');
      const [out] = await p.generate(
        PROMPTS[2]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      d.proc.stdin.write(`${JSON.stringify({ prompt: PROMPTS[2], params: out!.kvTransferParams })}\n`);
      assert.equal(await d.next(), 'queued');
      const engineP = await p.engine();
      // The property needs time to pass: the blocks outlive their lease while D heartbeats.
      await new Promise((r) => setTimeout(r, 1.5 * leaseSeconds * 1000));
      assert.ok(engineP.stats().kvCacheUsage > 0, "D's heartbeats kept P's lease alive past its duration");
      await d.kill();
      const killedAt = Date.now();
      await waitForEmptyPool(p, leaseSeconds * 1000 + 10_000);
      const elapsed = Date.now() - killedAt;
      assert.ok(elapsed <= leaseSeconds * 1000 + 10_000, `P freed the blocks ${elapsed} ms after D died`);
      const stats = engineP.stats().kvConnectorStats;
      assert.equal(stats?.['num_kv_expired_reqs'], 1, 'the lease expired: D never read the blocks');
    } finally {
      await d.kill();
      await p.shutdown();
    }
  });
});
