import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM, samplingParams } from '../../../src/engine/llm.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import {
  EXIT_AFTER_WRITES_ENV,
  STOP_AFTER_WRITES_ENV,
  withFaultConnectors,
} from '../helpers/fault-connectors.ts';
import {
  consumerParams,
  moriioOptions,
  moriioPorts,
  type PairSpec,
  producerParams,
  proxyRequestId,
} from './helpers.ts';

const FIXTURE = fileURLToPath(new URL('./fixtures/producer-process.ts', import.meta.url));

function startProducer(options: unknown, env: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', FIXTURE, JSON.stringify(options)], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, KVCONNECT_LOG_LEVEL: 'error', ...env },
  });
}

/** Lines the child printed, awaited by prefix (the stream stays open between waits). */
function lineReader(child: ChildProcess): (prefix: string) => Promise<string> {
  const lines: string[] = [];
  const waiters: (() => void)[] = [];
  let buf = '';
  child.stdout!.on('data', (chunk) => {
    buf += String(chunk);
    const parts = buf.split('\n');
    buf = parts.pop() ?? '';
    lines.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  child.once('exit', () => {
    for (const w of waiters.splice(0)) w();
  });
  return async (prefix) => {
    for (;;) {
      const i = lines.findIndex((l) => l.startsWith(prefix));
      if (i >= 0) return lines.splice(i, 1)[0]!.slice(prefix.length).trim();
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`producer exited before ${prefix}`);
      await new Promise<void>((r) => waiters.push(r));
    }
  };
}

describe('MoRIIO producer in another process', () => {
  for (const backend of ['rdma', 'xgmi'] as const) {
    it(`WRITE over ${backend}: D equals a single engine; D pool drains`, { timeout: 30_000 }, async () => {
      const spec: PairSpec = { readMode: false, backend };
      const [expected] = await plainOutputs('tiny', [PROMPTS[2]!]);
      const pPorts = await moriioPorts();
      const dPorts = await moriioPorts();
      const child = startProducer(moriioOptions(spec, 'kv_producer', pPorts));
      const readLine = lineReader(child);
      const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
      try {
        await readLine('READY');
        const tx = `tx-${randomUUID()}`;
        const rid = proxyRequestId(pPorts, dPorts);
        child.stdin!.write(
          `${JSON.stringify({ prompt: PROMPTS[2], requestId: rid, kvTransferParams: producerParams(tx) })}\n`,
        );
        const [[dOut], pDone] = await Promise.all([
          d.generate([PROMPTS[2]!], GREEDY, { requestIdPrefix: rid, kvTransferParams: consumerParams(tx) }),
          readLine('DONE'),
        ]);
        assert.deepEqual(dOut?.tokenIds, expected);
        assert.equal(JSON.parse(pDone).transfer_id, tx);
        await waitForEmptyPool(d);
      } finally {
        child.kill('SIGKILL');
        await d.shutdown();
      }
    });
  }

  it('a producer killed mid-write: D gives up after transfer_timeout and frees its blocks', {
    timeout: 30_000,
  }, async () => {
    const spec: PairSpec = { readMode: false, backend: 'rdma', transferTimeout: 1.5 };
    const pPorts = await moriioPorts();
    const dPorts = await moriioPorts();
    const child = startProducer(withFaultConnectors(moriioOptions(spec, 'kv_producer', pPorts)), {
      [EXIT_AFTER_WRITES_ENV]: '1',
    });
    const readLine = lineReader(child);
    const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
    try {
      await readLine('READY');
      const tx = `tx-${randomUUID()}`;
      const rid = proxyRequestId(pPorts, dPorts);
      const exited = once(child, 'exit');
      const started = Date.now();
      const { result, records } = await captureLogs(async () => {
        const dRun = d.generate([PROMPTS[0]!], GREEDY, {
          requestIdPrefix: rid,
          kvTransferParams: consumerParams(tx),
        });
        child.stdin!.write(
          `${JSON.stringify({ prompt: PROMPTS[0], requestId: rid, kvTransferParams: producerParams(tx) })}\n`,
        );
        const [code] = await exited;
        assert.equal(code, 137, 'the producer died after its first layer write');
        return dRun;
      });
      const [out] = result;
      assert.equal(out?.finishReason, 'error', 'the fail policy finishes the request with an error');
      assert.ok(Date.now() - started >= 1400, 'D waited for transfer_timeout');
      assert.ok(
        records.some((r) =>
          r.message.includes(
            'RDMA transfer timed out after 2s. Check NIC queue depth or reduce concurrency; adjust with kv_connector_extra_config.transfer_timeout.',
          ),
        ),
      );
      await waitForEmptyPool(d);
    } finally {
      child.kill('SIGKILL');
      await d.shutdown();
    }
  });
});

describe('MoRIIO producer that goes silent', () => {
  it("stopped (SIGSTOP) after its first layer write: D fails within transfer_timeout, keeps serving, and P's late writes never touch D's reused blocks", {
    timeout: 60_000,
  }, async () => {
    const spec: PairSpec = { readMode: false, backend: 'rdma', transferTimeout: 2 };
    const pPorts = await moriioPorts();
    const dPorts = await moriioPorts();
    const child = startProducer(withFaultConnectors(moriioOptions(spec, 'kv_producer', pPorts)), {
      [STOP_AFTER_WRITES_ENV]: '1',
    });
    const readLine = lineReader(child);
    // A small pool: the long request afterwards reuses the blocks the failed load had.
    const d = await LLM.create({ ...moriioOptions(spec, 'kv_consumer', dPorts), num_gpu_blocks: 20 });
    const [expectedLocal] = await plainOutputs('tiny', [PROMPTS[1]!]);
    const [expectedLong] = await plainOutputs('tiny', [PROMPTS[2]!], 140);
    try {
      await readLine('READY');
      const tx = `tx-${randomUUID()}`;
      const rid = proxyRequestId(pPorts, dPorts);
      const started = Date.now();
      const remote = d.generate([PROMPTS[0]!], GREEDY, {
        requestIdPrefix: rid,
        kvTransferParams: consumerParams(tx),
      });
      child.stdin!.write(
        `${JSON.stringify({ prompt: PROMPTS[0], requestId: rid, kvTransferParams: producerParams(tx) })}\n`,
      );
      await waitUntil('the producer to stop itself', () => processState(child.pid!) === 'T', {
        timeoutMs: 30_000,
      });
      const [local] = await d.generate([PROMPTS[1]!], GREEDY);
      assert.deepEqual(local!.tokenIds, expectedLocal, 'D serves other requests while P is silent');
      const [out] = await remote;
      assert.equal(out!.finishReason, 'error', 'policy fail: the load error fails the request');
      assert.ok(Date.now() - started < 2000 + 15_000, 'bounded by transfer_timeout');
      await waitForEmptyPool(d);
      // A long request takes the freed blocks; once its prompt is computed, P wakes up and its
      // queued writes reach D while the request still decodes from those blocks.
      const tokens: number[] = [];
      const stream = (await d.engine()).generate({
        requestId: 'reuses-the-blocks',
        prompt: PROMPTS[2]!,
        sampling: samplingParams({ ...GREEDY, maxTokens: 140 }),
      });
      for await (const delta of stream) {
        if (tokens.length === 0 && delta.newTokenIds.length > 0) child.kill('SIGCONT');
        tokens.push(...delta.newTokenIds);
      }
      assert.deepEqual(tokens, expectedLong, "P's late writes did not land in the reused blocks");
      await waitForEmptyPool(d);
    } finally {
      child.kill('SIGKILL');
      await d.shutdown();
    }
  });
});

/** The state letter of a process (R, S, T = stopped, ...) from /proc. */
function processState(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return '';
  }
}

describe('MoRIIO failure paths in one process', () => {
  it('defer_timeout reaps a held send nobody ACKs, with vLLM warning; P pool drains', async () => {
    const spec: PairSpec = { readMode: false, backend: 'rdma', deferTimeout: 0.3 };
    const pPorts = await moriioPorts();
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    try {
      const { records } = await captureLogs(async () => {
        const [out] = await p.generate(
          [PROMPTS[0]!],
          { ...GREEDY, maxTokens: 1 },
          {
            kvTransferParams: producerParams(`tx-${randomUUID()}`),
          },
        );
        assert.equal(out?.kvTransferParams?.['do_remote_prefill'], true);
        assert.ok((await p.engine()).engine.schedulerStats().kvCacheUsage > 0, 'P holds the blocks');
        await waitForEmptyPool(p);
      });
      assert.ok(
        records.some((r) =>
          /^Reaped 1 deferred sends with no finished_sending notification after 0s\. This indicates lost async KV completion notifications/.test(
            r.message,
          ),
        ),
      );
    } finally {
      await p.shutdown();
    }
  });

  it('a consumer request aborted before scheduling releases the producer blocks', async () => {
    const spec: PairSpec = { readMode: false, backend: 'xgmi', deferTimeout: 30 };
    const pPorts = await moriioPorts();
    const dPorts = await moriioPorts();
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
    try {
      const tx = `tx-${randomUUID()}`;
      const rid = proxyRequestId(pPorts, dPorts);
      // P finishes and holds its blocks (no D registered yet).
      const [pOut] = await p.generate(
        [PROMPTS[0]!],
        { ...GREEDY, maxTokens: 1 },
        {
          requestIdPrefix: rid,
          kvTransferParams: producerParams(tx),
        },
      );
      assert.equal(pOut?.kvTransferParams?.['transfer_id'], tx);
      assert.ok((await p.engine()).engine.schedulerStats().kvCacheUsage > 0);
      // D's request is aborted before its first schedule: D must release P's blocks itself.
      const engine = await d.engine();
      const controller = new AbortController();
      controller.abort();
      const stream = engine.generate(
        {
          requestId: `${rid}-0`,
          prompt: PROMPTS[0]!,
          sampling: samplingParams({ maxTokens: 4 }),
          kvTransferParams: consumerParams(tx),
        },
        controller.signal,
      );
      for await (const _ of stream) {
        // drain
      }
      await waitForEmptyPool(p, 3000);
      await waitForEmptyPool(d);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});
