/**
 * `kvconnect bench trace --simulate`: a Mooncake-format trace through the real scheduler
 * and KV cache manager (and optionally the OffloadingConnector's CPU tier) without the
 * model; prefix-cache hit ratio per cache capacity as a table, then one JSON object, and
 * optionally a JSON file and an SVG curve.
 */
import { writeFileSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import { parseHumanReadableInt } from '../../config/human-readable.ts';
import { formatErrorText, KVError } from '../../errors/index.ts';

function positiveInt(flag: string) {
  return (value: string): number => {
    const n = parseHumanReadableInt(value, flag);
    if (n === undefined || !Number.isSafeInteger(n) || n < 1) {
      throw new InvalidArgumentError(
        `${flag} must be a whole number >= 1 (human-readable allowed, e.g. 64K).`,
      );
    }
    return n;
  };
}

/** `a,b,c` of counts (human-readable), `unbounded`/`none` → null. */
function countList(flag: string, nullWord: string) {
  return (value: string): (number | null)[] =>
    value.split(',').map((part) => (part.trim() === nullWord ? null : positiveInt(flag)(part.trim())));
}

interface TraceFlags {
  trace: string;
  simulate?: boolean;
  deviceBlocks?: (number | null)[];
  cpuBytes: (number | null)[];
  blockSize: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  maxOutputLen: number;
  maxRequests?: number;
  model: string;
  resultJson?: string;
  svg?: string;
}

/** Log-spaced device capacities from one request's worth of blocks up to unbounded. */
function defaultSweep(minBlocks: number, unbounded: number, points = 6): (number | null)[] {
  const out: (number | null)[] = [];
  for (let i = 0; i < points - 1; i++) {
    const v = Math.round(minBlocks * (unbounded / minBlocks) ** (i / (points - 1)));
    if (out.at(-1) !== v) out.push(v);
  }
  out.push(null);
  return out;
}

export function registerBenchTraceCommand(program: Command): Command {
  const bench =
    program.commands.find((c) => c.name() === 'bench') ?? program.command('bench').description('benchmarks');
  const command = bench
    .command('trace')
    .description(
      'Replay a Mooncake-format trace through the scheduler and KV cache manager without the model (--simulate): prefix-cache hit ratio per cache capacity',
    )
    .requiredOption('--trace <file>', 'Mooncake-format JSONL trace')
    .option(
      '--simulate',
      'simulate without a model (the only mode; to replay against servers use bench serve --trace)',
    )
    .option(
      '--device-blocks <list>',
      'device (GPU) cache capacities in blocks, comma-separated; "unbounded" = nothing evicted (default: 6 log-spaced points up to unbounded)',
      countList('--device-blocks', 'unbounded'),
    )
    .option(
      '--cpu-bytes <list>',
      'OffloadingConnector CPU tier sizes (cpu_bytes_to_use), comma-separated, "none" = no tier; each is run with every device capacity',
      countList('--cpu-bytes', 'none'),
      [null],
    )
    .option('--block-size <n>', 'tokens per KV block', positiveInt('--block-size'), 512)
    .option('--max-num-seqs <n>', 'requests in flight at most', positiveInt('--max-num-seqs'), 16)
    .option('--max-num-batched-tokens <n>', 'tokens per step', positiveInt('--max-num-batched-tokens'), 16384)
    .option(
      '--max-output-len <n>',
      'cap the trace output lengths (decode steps)',
      positiveInt('--max-output-len'),
      1,
    )
    .option('--max-requests <n>', 'replay at most this many requests', positiveInt('--max-requests'))
    .option('--model <name>', 'model whose KV size per block sizes the CPU tier', 'tiny')
    .option('--result-json <file>', 'write the report as JSON')
    .option('--svg <file>', 'write the hit-ratio curve as SVG');
  return command.action(async (flags: TraceFlags) => {
    try {
      if (!flags.simulate) {
        throw new KVError('BENCH_TRACE_MODE', 'bench trace needs --simulate', {
          hint: 'Add --simulate. To replay a trace against running servers, use kvconnect bench serve --trace FILE.',
        });
      }
      const { loadTrace } = await import('../../bench-serve/trace.ts');
      const sim = await import('../../bench-trace/index.ts');
      const parsed = loadTrace(flags.trace);
      for (const p of parsed.problems.slice(0, 5)) console.error(`skipping line ${p.line}: ${p.message}`);
      const entries = parsed.entries.slice(0, flags.maxRequests ?? parsed.entries.length);
      const opts = {
        ...sim.SIMULATION_DEFAULTS,
        model: flags.model,
        blockSize: flags.blockSize,
        maxNumSeqs: flags.maxNumSeqs,
        maxNumBatchedTokens: flags.maxNumBatchedTokens,
        maxOutputLen: flags.maxOutputLen,
      };
      const longest = entries.reduce(
        (m, e) => Math.max(m, e.inputLength + Math.min(e.outputLength, opts.maxOutputLen)),
        1,
      );
      const device =
        flags.deviceBlocks ??
        defaultSweep(Math.ceil(longest / opts.blockSize), sim.unboundedBlocks(entries, opts));
      const points = [];
      for (const cpuBytes of flags.cpuBytes) {
        for (const deviceBlocks of device) {
          const result = await sim.simulate(entries, { deviceBlocks, cpuBytes }, opts);
          console.error(
            `device ${result.device_blocks} blocks, CPU ${cpuBytes ?? 'none'}: hit ratio ${(100 * result.hit_ratio).toFixed(2)}% (${result.seconds.toFixed(1)} s)`,
          );
          points.push(result);
        }
      }
      const report = sim.buildReport(
        flags.trace,
        entries.length,
        opts.blockSize,
        sim.traceReuse(entries, opts.blockSize),
        points,
      );
      console.log(sim.formatReport(report));
      if (flags.resultJson) writeFileSync(flags.resultJson, `${JSON.stringify(report, null, 2)}\n`);
      if (flags.svg) writeFileSync(flags.svg, `${sim.hitRatioSvg(report)}\n`);
      console.log(sim.reportJson(report));
    } catch (e) {
      console.error(formatErrorText(e));
      process.exitCode = 2;
    }
  });
}
