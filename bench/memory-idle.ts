/**
 * `npm run bench -- memory-idle [--mib 128] [--gaps 0,2000,5000,10000] [--rounds 5]`
 *
 * How fast memory that sat idle is to touch again: a native libc memcpy of the same buffers
 * (kept for the whole run, as an agent keeps its KV) right after `gap` ms of idleness,
 * paired with a second memcpy right after it (the baseline: the same memory, back to back).
 * Gaps are visited in turn in every round. On a VM whose kernel runs a DAMON `pageout`
 * scheme, the first copy after a few seconds idle is several times slower (docs/BENCHMARKS.md,
 * "DAMON"); the header says whether such a scheme is on. Prints a table, then one
 * JSON object.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { benchArgs, exitWithUsageError, positiveInteger, text } from './_args.ts';
import { damonPageoutNote } from './_damon.ts';
import { fmt, json, loadAverage, pairwiseRatio, summarize } from './_rounds.ts';
import { MEMCPY_MISSING, memcpyAvailable, memcpyRunner } from './_transfer-baselines.ts';

export async function main(args: string[]): Promise<void> {
  const flags = benchArgs(
    'memory-idle',
    {
      mib: positiveInteger(128, 'MiB copied each time'),
      gaps: text('comma-separated idle times in ms before the first copy of a pair', {
        default: '0,2000,5000,10000',
        value: 'list',
      }),
      rounds: positiveInteger(5, 'rounds, each visiting every gap; at least 5'),
    },
    args,
  );
  const gaps = flags.gaps.split(',').map((g) => Number(g.trim()));
  if (gaps.some((g) => !Number.isInteger(g) || g < 0)) {
    exitWithUsageError(
      'memory-idle',
      `--gaps expects whole milliseconds ≥ 0, comma-separated, got '${flags.gaps}'`,
    );
  }
  if (!memcpyAvailable()) {
    console.log(`memory-idle needs the native addon: ${MEMCPY_MISSING}`);
    process.exitCode = 2;
    return;
  }
  const rounds = Math.max(5, flags.rounds);
  const memcpy = memcpyRunner(flags.mib << 20);
  const loadStart = loadAverage();
  memcpy();
  const idle = gaps.map(() => [] as number[]);
  const after = gaps.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) {
    for (const [i, gap] of gaps.entries()) {
      await sleep(gap);
      idle[i]!.push(memcpy());
      after[i]!.push(memcpy());
    }
  }
  const damon = damonPageoutNote();
  console.log(
    `memory-idle: ${flags.mib} MiB memcpy after idle, paired with one right after; ${rounds} rounds; ` +
      `DAMON pageout ${damon === null ? 'off' : 'on'}; load average ${loadStart} at the start, ${loadAverage()} at the end`,
  );
  console.log(
    '| idle ms | after idle, GB/s | right after, GB/s | after idle ÷ right after, per pair |\n|---|---|---|---|',
  );
  const rows = gaps.map((gap, i) => {
    const a = summarize(idle[i]!);
    const b = summarize(after[i]!);
    const ratio = pairwiseRatio(after[i]!, idle[i]!);
    console.log(`| ${gap} | ${fmt(a, 2)} | ${fmt(b, 2)} | ${fmt(ratio, 2)} |`);
    return { idle_ms: gap, after_idle_gbps: json(a, 2), right_after_gbps: json(b, 2), ratio: json(ratio, 2) };
  });
  if (damon !== null) console.log(`note: ${damon}`);
  console.log(
    JSON.stringify({
      load_avg_start: loadStart,
      mib: flags.mib,
      rounds,
      damon_pageout: damon !== null,
      gaps: rows,
    }),
  );
}
