/**
 * MoRIIO WRITE (layer-pipelined push) vs READ (pull after prefill), `small` model, one
 * 2k-token prompt. The producer runs here; the consumer runs in a child process (so the
 * consumer's receive work does not share the producer's thread). Measured per mode: time
 * from the producer starting the prefill to the consumer having all KV; baseline: the
 * plain prefill time. Hidden = share of READ's exposed transfer time WRITE hides:
 * 1 - (write_total - prefill) / (read_total - prefill).
 *
 *   npm run bench -- moriio [--tokens 2048] [--backend xgmi|rdma] [--reps 2]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { onMoRIIOEvent } from '../src/connectors/moriio/index.ts';
import { LLM, type LLMOptions } from '../src/engine/llm.ts';
import { setLogLevel } from '../src/logging/logger.ts';

const MODEL = 'small';

function arg(args: string[], name: string, fallback: string): string {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : fallback;
}

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

function options(
  role: string,
  tokens: number,
  ports: { h: number; n: number },
  backend: string,
  read: boolean,
): LLMOptions {
  return {
    model: MODEL,
    max_model_len: tokens + 64,
    max_num_batched_tokens: tokens + 64,
    num_gpu_blocks: Math.ceil(tokens / 16) * 2 + 16,
    ...(role === ''
      ? {}
      : {
          kvTransferConfig: {
            kv_connector: 'MoRIIOConnector',
            kv_role: role as 'kv_producer' | 'kv_consumer',
            kv_connector_extra_config: {
              http_port: 8000,
              host_ip: '127.0.0.1',
              handshake_port: ports.h,
              notify_port: ports.n,
              backend,
              read_mode: read,
              transfer_timeout: 120,
            },
          },
        }),
  };
}

function promptTokens(n: number): number[] {
  return Array.from({ length: n }, (_, i) => 32 + ((i * 7919) % 200));
}

/** Child: the consumer. Prints READY, then EVENT lines; runs one request per stdin line. */
async function consumer(optionsJson: string): Promise<void> {
  setLogLevel('error');
  const llm = await LLM.create(JSON.parse(optionsJson) as LLMOptions);
  onMoRIIOEvent((e) => process.stdout.write(`EVENT ${JSON.stringify(e)}\n`));
  process.stdout.write('READY\n');
  let buf = '';
  for await (const chunk of process.stdin) {
    buf += String(chunk);
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const job = JSON.parse(buf.slice(0, nl)) as {
        tokens: number[];
        rid: string;
        params: Record<string, unknown>;
      };
      buf = buf.slice(nl + 1);
      void llm
        .generate(
          [{ promptTokenIds: job.tokens }],
          { maxTokens: 1, temperature: 0, ignoreEos: true },
          {
            requestIdPrefix: job.rid,
            kvTransferParams: job.params,
          },
        )
        .then(() => process.stdout.write('DONE\n'));
    }
  }
  await llm.shutdown();
}

class Child {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  #waiters: (() => void)[] = [];
  constructor(optionsJson: string) {
    const self = fileURLToPath(new URL('./main.ts', import.meta.url));
    this.proc = spawn(process.execPath, ['--import', 'tsx', self, 'moriio', '--consumer', optionsJson], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    let buf = '';
    this.proc.stdout!.on('data', (c) => {
      buf += String(c);
      const parts = buf.split('\n');
      buf = parts.pop() ?? '';
      this.lines.push(...parts);
      for (const w of this.#waiters.splice(0)) w();
    });
  }
  async wait(pred: (line: string) => boolean): Promise<string> {
    for (;;) {
      const i = this.lines.findIndex(pred);
      if (i >= 0) return this.lines.splice(i, 1)[0]!;
      if (this.proc.exitCode !== null) throw new Error('consumer exited');
      await new Promise<void>((r) => this.#waiters.push(r));
    }
  }
}

const now = (): number => performance.timeOrigin + performance.now();

async function runMode(
  read: boolean,
  tokens: number,
  backend: string,
  reps: number,
): Promise<{ totalMs: number[]; prefillMs: number[] }> {
  const pPorts = { h: await freePort(), n: await freePort() };
  const dPorts = { h: await freePort(), n: await freePort() };
  const p = await LLM.create(options('kv_producer', tokens, pPorts, backend, read));
  const child = new Child(JSON.stringify(options('kv_consumer', tokens, dPorts, backend, read)));
  const totalMs: number[] = [];
  const prefillMs: number[] = [];
  try {
    await child.wait((l) => l === 'READY');
    const zmq = (x: { h: number; n: number }) => `host:127.0.0.1,handshake:${x.h},notify:${x.n}`;
    for (let rep = 0; rep < reps + 1; rep++) {
      const tx = `tx-${randomUUID()}`;
      const rid = `___prefill_addr_${zmq(pPorts)}___decode_addr_${zmq(dPorts)}_${randomUUID().replaceAll('-', '')}`;
      // rep 0 warms up with a short prompt (connections, code paths) and is not counted.
      const prompt = promptTokens(rep === 0 ? 64 : tokens).map((t, i) => (i === 0 ? 32 + rep : t));
      const dParams = {
        do_remote_decode: false,
        do_remote_prefill: true,
        transfer_id: tx,
        remote_dp_size: 1,
        remote_tp_size: 1,
        remote_dp_rank: 0,
      };
      const send = (params: Record<string, unknown>): void => {
        child.proc.stdin!.write(`${JSON.stringify({ tokens: prompt, rid, params })}\n`);
      };
      if (!read) {
        send(dParams);
        // Let D's remote_blocks reach P first, so every layer can be pushed as it completes.
        await new Promise((r) => setTimeout(r, 200));
      }
      const t0 = now();
      const [pOut] = await p.generate(
        [{ promptTokenIds: prompt }],
        { maxTokens: 1, temperature: 0, ignoreEos: true },
        {
          requestIdPrefix: rid,
          kvTransferParams: { do_remote_decode: true, transfer_id: tx, remote_tp_size: 1 },
        },
      );
      const tPrefill = now();
      if (read) send({ ...dParams, remote_block_ids: pOut?.kvTransferParams?.['remote_block_ids'] });
      const kind = read ? 'reads_complete' : 'recv_complete';
      const line = await child.wait((l) => l.startsWith('EVENT') && l.includes(kind) && l.includes(tx));
      const at = (JSON.parse(line.slice(6)) as { at: number }).at;
      await child.wait((l) => l === 'DONE');
      if (rep === 0) continue; // warm-up
      totalMs.push(at - t0);
      prefillMs.push(tPrefill - t0);
    }
  } finally {
    child.proc.stdin!.end();
    child.proc.kill();
    await p.shutdown();
  }
  return { totalMs, prefillMs };
}

const median = (xs: number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

export async function main(args: string[]): Promise<void> {
  if (args[0] === '--consumer') return consumer(args[1] ?? '{}');
  setLogLevel('error');
  const tokens = Number(arg(args, '--tokens', '2048'));
  const backend = arg(args, '--backend', 'xgmi');
  const reps = Number(arg(args, '--reps', '2'));
  const plain = await LLM.create(options('', tokens, { h: 0, n: 0 }, backend, false));
  const base: number[] = [];
  for (let rep = 0; rep < reps + 1; rep++) {
    const prompt = promptTokens(rep === 0 ? 64 : tokens).map((t, i) => (i === 0 ? 40 + rep : t));
    const t0 = now();
    await plain.generate([{ promptTokenIds: prompt }], { maxTokens: 1, temperature: 0, ignoreEos: true });
    if (rep > 0) base.push(now() - t0);
  }
  await plain.shutdown();
  const write = await runMode(false, tokens, backend, reps);
  const read = await runMode(true, tokens, backend, reps);
  const prefill = median(base);
  const w = median(write.totalMs);
  const r = median(read.totalMs);
  const exposedRead = r - median(read.prefillMs);
  const exposedWrite = Math.max(0, w - median(write.prefillMs));
  const hidden = exposedRead > 0 ? 1 - exposedWrite / exposedRead : Number.NaN;
  const rows: [string, number][] = [
    ['plain prefill (baseline)', prefill],
    ['WRITE: P start → D has all KV', w],
    ['READ: P start → D has all KV', r],
    ['READ transfer after prefill', exposedRead],
    ['WRITE transfer after prefill', exposedWrite],
  ];
  console.log(`MoRIIO ${MODEL}, ${tokens}-token prompt, backend ${backend}, median of ${reps}`);
  for (const [k, v] of rows) console.log(`${k.padEnd(32)} ${v.toFixed(1).padStart(9)} ms`);
  console.log(`${'transfer hidden under compute'.padEnd(32)} ${(hidden * 100).toFixed(1).padStart(9)} %`);
  console.log(
    JSON.stringify({
      bench: 'moriio',
      model: MODEL,
      prompt_tokens: tokens,
      backend,
      reps,
      plain_prefill_ms: +prefill.toFixed(1),
      write_total_ms: +w.toFixed(1),
      read_total_ms: +r.toFixed(1),
      read_exposed_transfer_ms: +exposedRead.toFixed(1),
      write_exposed_transfer_ms: +exposedWrite.toFixed(1),
      write_hidden_fraction: +hidden.toFixed(3),
    }),
  );
}
