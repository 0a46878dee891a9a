/**
 * MoRIIO WRITE (layer-pipelined push) vs READ (pull after prefill), `small` model, one
 * 2k-token prompt. The producers run here; each consumer runs in a child process (so its
 * receive work does not share the producer's thread). Each rep runs a plain engine's
 * prefill (the baseline), a WRITE and a READ request, in rotating order. Per mode: P's own
 * prefill time, and the time from P starting the prefill to D holding all of the KV.
 * Reported per rep, then as the median of the reps with min–max:
 * - WRITE's cost to P: P's prefill while pushing every layer / the plain prefill;
 * - the exposed transfer: total − P's prefill, for WRITE and READ;
 * - hidden = 1 − WRITE's exposed transfer / READ's.
 *
 * With `--compare-transfer-thread`, a second WRITE pair whose transfer agents run on the
 * engine's event loop (`transfer_thread: false`) joins the rotation: WRITE with the agent in
 * its thread (the default) against WRITE with it on the loop, per rep.
 *
 *   npm run bench -- moriio [--tokens 2048] [--backend xgmi|rdma] [--reps 5] [--compare-transfer-thread]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { onMoRIIOEvent } from '../src/connectors/moriio/index.ts';
import { LLM, type LLMOptions } from '../src/engine/llm.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { benchArgs, positiveInteger, text, toggle } from './_args.ts';
import { fmt, json, loadAverage, pairwiseRatio, type Summary, summarize } from './_rounds.ts';

const MODEL = 'small';

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
  thread = true,
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
              transfer_thread: thread,
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

interface Sample {
  totalMs: number;
  prefillMs: number;
}

/** One MoRIIO pair (P here, D in a child process) in WRITE or READ mode, kept for every rep. */
class Pair {
  readonly #read: boolean;
  readonly #p: LLM;
  readonly #child: Child;
  readonly #ridPrefix: string;

  private constructor(read: boolean, p: LLM, child: Child, ridPrefix: string) {
    this.#read = read;
    this.#p = p;
    this.#child = child;
    this.#ridPrefix = ridPrefix;
  }

  static async start(read: boolean, tokens: number, backend: string, thread = true): Promise<Pair> {
    const pPorts = { h: await freePort(), n: await freePort() };
    const dPorts = { h: await freePort(), n: await freePort() };
    const p = await LLM.create(options('kv_producer', tokens, pPorts, backend, read, thread));
    const child = new Child(JSON.stringify(options('kv_consumer', tokens, dPorts, backend, read, thread)));
    await child.wait((l) => l === 'READY');
    const zmq = (x: { h: number; n: number }) => `host:127.0.0.1,handshake:${x.h},notify:${x.n}`;
    return new Pair(read, p, child, `___prefill_addr_${zmq(pPorts)}___decode_addr_${zmq(dPorts)}_`);
  }

  /** One request; `prompt` must differ between calls (no prefix reuse). */
  async once(prompt: number[]): Promise<Sample> {
    const tx = `tx-${randomUUID()}`;
    const rid = `${this.#ridPrefix}${randomUUID().replaceAll('-', '')}`;
    const dParams = {
      do_remote_decode: false,
      do_remote_prefill: true,
      transfer_id: tx,
      remote_dp_size: 1,
      remote_tp_size: 1,
      remote_dp_rank: 0,
    };
    const send = (params: Record<string, unknown>): void => {
      this.#child.proc.stdin!.write(`${JSON.stringify({ tokens: prompt, rid, params })}\n`);
    };
    if (!this.#read) {
      send(dParams);
      // Let D's remote_blocks reach P first, so every layer can be pushed as it completes.
      await new Promise((r) => setTimeout(r, 200));
    }
    const t0 = now();
    const [pOut] = await this.#p.generate(
      [{ promptTokenIds: prompt }],
      { maxTokens: 1, temperature: 0, ignoreEos: true },
      {
        requestIdPrefix: rid,
        kvTransferParams: { do_remote_decode: true, transfer_id: tx, remote_tp_size: 1 },
      },
    );
    const tPrefill = now();
    if (this.#read) send({ ...dParams, remote_block_ids: pOut?.kvTransferParams?.['remote_block_ids'] });
    const kind = this.#read ? 'reads_complete' : 'recv_complete';
    const line = await this.#child.wait((l) => l.startsWith('EVENT') && l.includes(kind) && l.includes(tx));
    const at = (JSON.parse(line.slice(6)) as { at: number }).at;
    await this.#child.wait((l) => l === 'DONE');
    return { totalMs: at - t0, prefillMs: tPrefill - t0 };
  }

  async close(): Promise<void> {
    this.#child.proc.stdin!.end();
    this.#child.proc.kill();
    await this.#p.shutdown();
  }
}

export async function main(args: string[]): Promise<void> {
  // Internal: this bench's own child process (Child below), not a flag for users.
  if (args[0] === '--consumer') return consumer(args[1] ?? '{}');
  const {
    tokens,
    backend,
    reps,
    'compare-transfer-thread': compareThread,
  } = benchArgs(
    'moriio',
    {
      tokens: positiveInteger(2048, 'tokens of the prompt'),
      backend: text('MoRIIO backend: xgmi over shm, rdma over tcp', {
        default: 'xgmi',
        choices: ['xgmi', 'rdma'],
      }),
      reps: positiveInteger(5, 'reps counted after one warm-up rep'),
      'compare-transfer-thread': toggle(
        'also WRITE with the transfer agents on the event loop, transfer_thread: false',
      ),
    },
    args,
  );
  setLogLevel('error');
  const plain = await LLM.create(options('', tokens, { h: 0, n: 0 }, backend, false));
  const write = await Pair.start(false, tokens, backend);
  const read = await Pair.start(true, tokens, backend);
  const writeOnLoop = compareThread ? await Pair.start(false, tokens, backend, false) : null;
  const plainMs: number[] = [];
  const writes: Sample[] = [];
  const reads: Sample[] = [];
  const writesOnLoop: Sample[] = [];
  try {
    const prefillPlain = async (prompt: number[]): Promise<number> => {
      const t0 = now();
      await plain.generate([{ promptTokenIds: prompt }], { maxTokens: 1, temperature: 0, ignoreEos: true });
      return now() - t0;
    };
    // rep 0 warms every path up with a short prompt (connections, code paths); not counted.
    for (let rep = 0; rep <= reps; rep++) {
      const prompt = (salt: number): number[] =>
        promptTokens(rep === 0 ? 64 : tokens).map((t, i) => (i === 0 ? 32 + 3 * rep + salt : t));
      const runs: Array<() => Promise<void>> = [
        async () => void plainMs.push(await prefillPlain(prompt(0))),
        async () => void writes.push(await write.once(prompt(1))),
        async () => void reads.push(await read.once(prompt(2))),
      ];
      if (writeOnLoop) runs.push(async () => void writesOnLoop.push(await writeOnLoop.once(prompt(3))));
      for (let k = 0; k < runs.length; k++) await runs[(k + rep) % runs.length]!();
      if (rep === 0) {
        plainMs.length = 0;
        writes.length = 0;
        reads.length = 0;
        writesOnLoop.length = 0;
      }
    }
  } finally {
    await write.close();
    await read.close();
    await writeOnLoop?.close();
    await plain.shutdown();
  }

  const exposed = (xs: Sample[]): number[] => xs.map((x) => Math.max(0, x.totalMs - x.prefillMs));
  const prefills = (xs: Sample[]): number[] => xs.map((x) => x.prefillMs);
  const writeCost = pairwiseRatio(plainMs, prefills(writes));
  const readCost = pairwiseRatio(plainMs, prefills(reads));
  const exposedWrite = exposed(writes);
  const hidden = summarize(exposed(reads).map((r, i) => (r > 0 ? 1 - exposedWrite[i]! / r : Number.NaN)));
  const rows: Array<[string, Summary]> = [
    ['plain prefill (baseline)', summarize(plainMs)],
    ['WRITE: P prefill (pushing each layer)', summarize(prefills(writes))],
    ['READ: P prefill', summarize(prefills(reads))],
    ['WRITE: P start → D has all KV', summarize(writes.map((x) => x.totalMs))],
    ['READ: P start → D has all KV', summarize(reads.map((x) => x.totalMs))],
    ['WRITE: transfer after P prefill', summarize(exposedWrite)],
    ['READ: transfer after P prefill', summarize(exposed(reads))],
  ];
  if (writeOnLoop) {
    rows.push(
      ['WRITE, agent on the engine loop: P prefill', summarize(prefills(writesOnLoop))],
      [
        'WRITE, agent on the engine loop: P start → D has all KV',
        summarize(writesOnLoop.map((x) => x.totalMs)),
      ],
      ['WRITE, agent on the engine loop: transfer after P prefill', summarize(exposed(writesOnLoop))],
    );
  }
  const threadVsLoop = writeOnLoop
    ? {
        prefill: pairwiseRatio(prefills(writesOnLoop), prefills(writes)),
        total: pairwiseRatio(
          writesOnLoop.map((x) => x.totalMs),
          writes.map((x) => x.totalMs),
        ),
      }
    : null;
  console.log(
    `MoRIIO ${MODEL}, ${tokens}-token prompt, backend ${backend}, ${reps} reps (plain, WRITE, READ in ` +
      `rotating order), median (min–max); load average ${loadAverage()}`,
  );
  console.log('| measure | value |\n|---|---|');
  for (const [k, v] of rows) console.log(`| ${k} | ${fmt(v, 1)} ms |`);
  console.log(`| WRITE's cost to P's prefill (WRITE P prefill / plain, per rep) | ${fmt(writeCost, 3)}× |`);
  console.log(`| READ P prefill / plain, per rep | ${fmt(readCost, 3)}× |`);
  console.log(`| transfer hidden by WRITE (1 − WRITE exposed / READ exposed, per rep) | ${fmt(hidden, 3)} |`);
  if (threadVsLoop) {
    console.log(
      `| WRITE P prefill, agent in a thread / on the loop, per rep | ${fmt(threadVsLoop.prefill, 3)}× |`,
    );
    console.log(`| WRITE P start → D has all KV, thread / loop, per rep | ${fmt(threadVsLoop.total, 3)}× |`);
  }
  console.log(
    JSON.stringify({
      bench: 'moriio',
      model: MODEL,
      prompt_tokens: tokens,
      backend,
      reps,
      load_average_1m: loadAverage(),
      plain_prefill_ms: json(summarize(plainMs), 1),
      write_prefill_ms: json(summarize(prefills(writes)), 1),
      read_prefill_ms: json(summarize(prefills(reads)), 1),
      write_total_ms: json(summarize(writes.map((x) => x.totalMs)), 1),
      read_total_ms: json(summarize(reads.map((x) => x.totalMs)), 1),
      write_exposed_transfer_ms: json(summarize(exposedWrite), 1),
      read_exposed_transfer_ms: json(summarize(exposed(reads)), 1),
      write_prefill_cost_ratio: json(writeCost),
      read_prefill_ratio: json(readCost),
      write_hidden_fraction: json(hidden),
      ...(threadVsLoop
        ? {
            write_on_loop_prefill_ms: json(summarize(prefills(writesOnLoop)), 1),
            write_on_loop_total_ms: json(summarize(writesOnLoop.map((x) => x.totalMs)), 1),
            write_on_loop_exposed_transfer_ms: json(summarize(exposed(writesOnLoop)), 1),
            write_prefill_thread_over_loop_ratio: json(threadVsLoop.prefill),
            write_total_thread_over_loop_ratio: json(threadVsLoop.total),
          }
        : {}),
    }),
  );
}
