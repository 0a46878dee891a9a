/**
 * `kvconnect bench serve`: a load generator like `vllm bench serve` (TTFT, TPOT, ITL,
 * E2E, throughput; a table, a JSON file and an SVG chart).
 */
import { writeFileSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import { BENCH_SERVE_DEFAULTS, type BenchServeOptions } from '../../bench-serve/options.ts';
import { formatErrorText } from '../../errors/index.ts';
import { readEnv } from '../../util/envs.ts';

function num(name: string, min: number, integer: boolean) {
  return (value: string): number => {
    const n = value === 'inf' ? Number.POSITIVE_INFINITY : Number(value);
    if (Number.isNaN(n) || n < min || (integer && !Number.isInteger(n))) {
      throw new InvalidArgumentError(`${name} must be ${integer ? 'an integer' : 'a number'} >= ${min}.`);
    }
    return n;
  };
}

type NumField = {
  [K in keyof BenchServeOptions]: BenchServeOptions[K] extends number | undefined ? K : never;
}[keyof BenchServeOptions];
type TextField = Exclude<keyof BenchServeOptions, NumField | 'model' | 'ignoreEos'>;

/**
 * The flags in help order, each naming the BenchServeOptions field it fills; a flag shows a
 * default when BENCH_SERVE_DEFAULTS has one for its field.
 */
type FlagDef =
  | { kind: 'num'; flag: string; arg: string; help: string; min: number; integer: boolean; field: NumField }
  | { kind: 'text'; flag: string; arg: string; help: string; field: TextField }
  | { kind: 'bool'; flag: string; help: string; field: 'ignoreEos' };

const FLAGS: readonly FlagDef[] = [
  { kind: 'text', flag: '--base-url', arg: '<url>', help: 'server URL', field: 'baseUrl' },
  {
    kind: 'text',
    flag: '--endpoint',
    arg: '<path>',
    help: '/v1/completions or /v1/chat/completions',
    field: 'endpoint',
  },
  {
    kind: 'num',
    flag: '--request-rate',
    arg: '<r>',
    help: 'requests per second (Poisson arrivals) or inf',
    min: 0,
    integer: false,
    field: 'requestRate',
  },
  {
    kind: 'num',
    flag: '--max-concurrency',
    arg: '<n>',
    help: 'requests in flight at most',
    min: 1,
    integer: true,
    field: 'maxConcurrency',
  },
  {
    kind: 'num',
    flag: '--num-prompts',
    arg: '<n>',
    help: 'number of requests',
    min: 1,
    integer: true,
    field: 'numPrompts',
  },
  {
    kind: 'num',
    flag: '--random-input-len',
    arg: '<n>',
    help: 'prompt length in words',
    min: 1,
    integer: true,
    field: 'randomInputLen',
  },
  {
    kind: 'num',
    flag: '--random-output-len',
    arg: '<n>',
    help: 'max_tokens per request',
    min: 1,
    integer: true,
    field: 'randomOutputLen',
  },
  {
    kind: 'num',
    flag: '--random-range-ratio',
    arg: '<r>',
    help: 'lengths uniform in [len*(1-r), len*(1+r)]',
    min: 0,
    integer: false,
    field: 'randomRangeRatio',
  },
  {
    kind: 'num',
    flag: '--seed',
    arg: '<n>',
    help: 'seed of the random prompts and arrivals',
    min: 0,
    integer: true,
    field: 'seed',
  },
  {
    kind: 'text',
    flag: '--trace',
    arg: '<path>',
    help: 'replay a Mooncake-format JSONL trace instead of random prompts',
    field: 'trace',
  },
  {
    kind: 'num',
    flag: '--trace-block-tokens',
    arg: '<n>',
    help: 'words per trace hash block (the trace uses 512)',
    min: 1,
    integer: true,
    field: 'traceBlockTokens',
  },
  {
    kind: 'num',
    flag: '--trace-time-scale',
    arg: '<x>',
    help: 'multiply trace timestamps (0.1 = 10x faster)',
    min: 0,
    integer: false,
    field: 'traceTimeScale',
  },
  {
    kind: 'num',
    flag: '--max-requests',
    arg: '<n>',
    help: 'replay at most this many requests',
    min: 1,
    integer: true,
    field: 'maxRequests',
  },
  {
    kind: 'num',
    flag: '--trace-max-output-len',
    arg: '<n>',
    help: 'cap the trace output lengths',
    min: 1,
    integer: true,
    field: 'traceMaxOutputLen',
  },
  {
    kind: 'bool',
    flag: '--ignore-eos',
    help: 'send ignore_eos so every request generates max_tokens',
    field: 'ignoreEos',
  },
  {
    kind: 'num',
    flag: '--timeout-ms',
    arg: '<ms>',
    help: 'per-request deadline',
    min: 1,
    integer: true,
    field: 'timeoutMs',
  },
  {
    kind: 'num',
    flag: '--max-duration',
    arg: '<s>',
    help: 'start no request after this many seconds',
    min: 0,
    integer: false,
    field: 'maxDurationS',
  },
  { kind: 'text', flag: '--api-key', arg: '<key>', help: 'sent as Authorization: Bearer', field: 'apiKey' },
  {
    kind: 'text',
    flag: '--result-json',
    arg: '<file>',
    help: 'write the results as JSON',
    field: 'resultJson',
  },
  { kind: 'text', flag: '--svg', arg: '<file>', help: 'write a TTFT/ITL histogram as SVG', field: 'svg' },
];

/** Commander's attribute name of a flag (`--max-duration` → `maxDuration`). */
function attributeName(flag: string): string {
  return flag.slice(2).replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

function addFlag(command: Command, def: FlagDef): void {
  const d = BENCH_SERVE_DEFAULTS;
  if (def.kind === 'bool') {
    command.option(def.flag, def.help, d[def.field]);
  } else if (def.kind === 'num') {
    const parse = num(def.flag, def.min, def.integer);
    const fallback = d[def.field];
    if (fallback === undefined) command.option(`${def.flag} ${def.arg}`, def.help, parse);
    else command.option(`${def.flag} ${def.arg}`, def.help, parse, fallback);
  } else {
    const fallback = d[def.field];
    if (fallback === undefined) command.option(`${def.flag} ${def.arg}`, def.help);
    else command.option(`${def.flag} ${def.arg}`, def.help, fallback);
  }
}

/** BenchServeOptions from commander's values; the API key falls back to OPENAI_API_KEY. */
function optionsFromFlags(o: Record<string, unknown>): BenchServeOptions {
  const options: Record<string, unknown> = { ...BENCH_SERVE_DEFAULTS, model: o['model'] };
  for (const def of FLAGS) options[def.field] = o[attributeName(def.flag)];
  options['ignoreEos'] = o['ignoreEos'] === true;
  options['apiKey'] = (o['apiKey'] as string | undefined) ?? readEnv('OPENAI_API_KEY');
  return options as unknown as BenchServeOptions;
}

/** Adds `bench serve` (creating `bench` if another command did not already). */
export function registerBenchServeCommand(program: Command): Command {
  const bench =
    program.commands.find((c) => c.name() === 'bench') ?? program.command('bench').description('benchmarks');
  const command = bench
    .command('serve')
    .description('Load-test an OpenAI-compatible server (kvconnect serve, kvconnect proxy or vLLM)')
    .requiredOption('--model <name>', 'model name sent in each request');
  for (const def of FLAGS) addFlag(command, def);
  return command.action(async (o: Record<string, unknown>) => {
    const options = optionsFromFlags(o);
    const { runBenchServe, formatTable, resultJson, latencySvg } = await import('../../bench-serve/index.ts');
    try {
      const run = await runBenchServe(options);
      console.log(formatTable(run.summary));
      if (options.resultJson)
        writeFileSync(options.resultJson, `${JSON.stringify(resultJson(run, options), null, 2)}\n`);
      if (options.svg) {
        const ok = run.results.filter((r) => r.ok);
        writeFileSync(
          options.svg,
          latencySvg(
            ok.map((r) => r.ttftMs),
            ok.flatMap((r) => r.itlMs),
          ),
        );
      }
      if (run.summary.completed === 0) process.exitCode = 1;
    } catch (e) {
      console.error(formatErrorText(e));
      process.exitCode = 2;
    }
  });
}
