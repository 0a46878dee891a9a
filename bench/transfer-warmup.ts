/**
 * `npm run bench -- transfer-warmup [--rounds 5] [--windows 10] [--per-window 500] [--budget 8192]`
 *
 * How a fresh agent pair's one-block latency falls as V8 optimizes its JavaScript, with V8's
 * own interrupt budget (kvconnect's default) and with `--budget` (the opt-in
 * `KVCONNECT_V8_INTERRUPT_BUDGET`, src/util/jit-tuning.ts). Each round starts, for every backend (shm, tcp) and both
 * settings, in an order that alternates round by round, a new process pair (this bench's child
 * runs _transfer-warmup-curve.ts, which starts its own peer) and times `--windows` windows of
 * `--per-window` one-block (64 KiB) READs and WRITEs, alternating. The table gives, per window,
 * the median and min–max over the rounds of each window's p50, the ratio of the first window to
 * the last (the pair's steady state) and, per round, the small budget's last window over V8's. This is
 * also why `npm run bench -- transfer` warms its agents before timing them (`--warmup-rounds`,
 * bench/_transfer-warmup.ts) and reports the cold figures too. Prints a table, then one JSON
 * object.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  MIN_V8_INTERRUPT_BUDGET,
  V8_INTERRUPT_BUDGET_ENV,
  V8_OWN_INTERRUPT_BUDGET,
} from '../src/util/jit-tuning.ts';
import { benchArgs, exitWithUsageError, positiveInteger } from './_args.ts';
import { damonPageoutNote } from './_damon.ts';
import { fmt, json, loadAverage, pairwiseRatio, type Summary, summarize } from './_rounds.ts';
import type { WarmupCurve } from './_transfer-warmup-curve.ts';

const CURVE_SCRIPT = fileURLToPath(new URL('./_transfer-warmup-curve.ts', import.meta.url));

/** Runs one curve in a fresh process; rejects with its stderr when it fails. */
function curveInChild(
  backend: 'SHM' | 'TCP',
  windows: number,
  perWindow: number,
  env: Record<string, string>,
): Promise<WarmupCurve> {
  return new Promise((resolve, reject) => {
    const proc = spawn(
      process.execPath,
      ['--import', 'tsx', CURVE_SCRIPT, backend, String(windows), String(perWindow)],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } },
    );
    let out = '';
    let err = '';
    proc.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    proc.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    proc.once('error', reject);
    proc.once('exit', (code) => {
      if (code === 0) resolve(JSON.parse(out.trim().split('\n').at(-1)!) as WarmupCurve);
      else reject(new Error(`the ${backend} warm-up curve exited with ${code}: ${err.trim()}`));
    });
  });
}

export async function main(args: string[]): Promise<void> {
  const flags = benchArgs(
    'transfer-warmup',
    {
      rounds: positiveInteger(5, 'rounds (fresh process pairs per backend and setting), at least 5'),
      windows: positiveInteger(10, 'windows per pair, at least 2'),
      'per-window': positiveInteger(500, 'one-block READs (and as many WRITEs) per window'),
      budget: positiveInteger(8192, "the interrupt budget (bytes, ≥ 1024) timed against V8's own"),
    },
    args,
  );
  const rounds = Math.max(5, flags.rounds);
  const windows = Math.max(2, flags.windows);
  const perWindow = flags['per-window'];
  const budget = flags.budget;
  if (budget < MIN_V8_INTERRUPT_BUDGET) {
    exitWithUsageError(
      'transfer-warmup',
      `--budget expects a number of bytes ≥ ${MIN_V8_INTERRUPT_BUDGET}, got ${budget} (V8's own is ${V8_OWN_INTERRUPT_BUDGET})`,
    );
  }
  const loadStart = loadAverage();
  const paths = ['shm_read', 'shm_write', 'tcp_read', 'tcp_write'] as const;
  const settings = {
    small_budget: { [V8_INTERRUPT_BUDGET_ENV]: String(budget) },
    v8_budget: { [V8_INTERRUPT_BUDGET_ENV]: '0' },
  } as const;
  type Setting = keyof typeof settings;
  type Name = `${(typeof paths)[number]}_${Setting}`;
  const series = paths.flatMap((p) => (['small_budget', 'v8_budget'] as const).map((s): Name => `${p}_${s}`));
  /** Per series, per round, the p50 of each window. */
  const curves = Object.fromEntries(series.map((n) => [n, [] as number[][]])) as Record<Name, number[][]>;
  const runs = (['SHM', 'TCP'] as const).flatMap((b) =>
    (['small_budget', 'v8_budget'] as const).map((s) => [b, s] as const),
  );
  for (let r = 0; r < rounds; r++) {
    for (const [backend, setting] of r % 2 === 0 ? runs : [...runs].reverse()) {
      const c = await curveInChild(backend, windows, perWindow, settings[setting]);
      const p = backend === 'SHM' ? 'shm' : 'tcp';
      curves[`${p}_read_${setting}`].push(c.read);
      curves[`${p}_write_${setting}`].push(c.write);
    }
  }
  const atWindow = (name: Name, w: number): Summary => summarize(curves[name].map((c) => c[w]!));
  const lastWindows = (name: Name): number[] => curves[name].map((c) => c[windows - 1]!);
  /** Per round, the first window's p50 over the last window's. */
  const firstOverLast = (name: Name): Summary =>
    pairwiseRatio(
      lastWindows(name),
      curves[name].map((c) => c[0]!),
    );
  /** Per round, the small budget's last window over V8's. */
  const smallOverV8 = (path: (typeof paths)[number]): Summary =>
    pairwiseRatio(lastWindows(`${path}_v8_budget`), lastWindows(`${path}_small_budget`));
  /** Per setting, the windows after which each round's p50 stayed within 10% of its last window. */
  const settledAfter = (name: Name): Summary =>
    summarize(
      curves[name].map((c) => {
        let w = windows - 1;
        while (w > 0 && c[w - 1]! <= c[windows - 1]! * 1.1) w--;
        return (w + 1) * perWindow * 2;
      }),
    );

  console.log(
    `transfer-warmup: ${rounds} rounds, each a fresh process pair per backend and V8 setting (small budget: ${V8_INTERRUPT_BUDGET_ENV}=${budget}; V8's own, ${V8_OWN_INTERRUPT_BUDGET}: kvconnect's default); ` +
      `${windows} windows of ${perWindow} one-block (64 KiB) READs and WRITEs, alternating; p50 per window in µs, median (min–max) over the rounds; ` +
      `load average ${loadStart} at the start, ${loadAverage()} at the end`,
  );
  console.log(`| transfers so far | ${series.join(' | ')} |`);
  console.log(`|---|${series.map(() => '---|').join('')}`);
  for (let w = 0; w < windows; w++) {
    console.log(`| ${(w + 1) * perWindow * 2} | ${series.map((n) => fmt(atWindow(n, w))).join(' | ')} |`);
  }
  console.log(`| first ÷ last window | ${series.map((n) => fmt(firstOverLast(n), 2)).join(' | ')} |`);
  console.log(
    `| settled after (within 10% of the last window) | ${series.map((n) => fmt(settledAfter(n))).join(' | ')} |`,
  );
  console.log(`\n| last window, budget ${budget} ÷ V8's own, per round | ${paths.join(' | ')} |`);
  console.log(`|---|${paths.map(() => '---|').join('')}`);
  console.log(`| | ${paths.map((p) => fmt(smallOverV8(p), 2)).join(' | ')} |`);
  const damon = damonPageoutNote();
  if (damon !== null) console.log(`note: ${damon}`);
  console.log(
    JSON.stringify({
      load_avg_start: loadStart,
      load_avg_end: loadAverage(),
      rounds,
      windows,
      transfers_per_window: perWindow * 2,
      small_interrupt_budget_bytes: budget,
      damon_pageout: damon !== null,
      ...Object.fromEntries(
        series.flatMap((n) => [
          [`${n}_p50_us_per_window`, Array.from({ length: windows }, (_, w) => json(atWindow(n, w), 1))],
          [`${n}_first_vs_last_window`, json(firstOverLast(n), 2)],
          [`${n}_settled_after_transfers`, json(settledAfter(n), 0)],
        ]),
      ),
      ...Object.fromEntries(
        paths.map((p) => [`${p}_last_window_small_vs_v8_budget`, json(smallOverV8(p), 2)]),
      ),
    }),
  );
}
