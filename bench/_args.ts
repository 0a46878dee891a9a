/**
 * The benchmarks' command lines. Each bench declares its flags once (benchArgs); they are
 * parsed by node:util's parseArgs in strict mode, `--help`/`-h` prints the bench's summary
 * and its flags with their defaults (exit 0, before any work), and an unknown flag or a bad
 * value is an error that names the flag, what it expects, what it got and how to fix it
 * (exit 2): a typo never silently runs the bench with its defaults.
 *
 * This module is kept light (node:util and the config errors' name matching): bench/main.ts
 * imports it to list the benches.
 */
import { parseArgs } from 'node:util';
import { closestNames } from '../src/config/config-error.ts';

/** One line per bench, for `npm run bench -- --help` and the bench's own `--help`. */
export const BENCH_SUMMARIES = {
  emulate:
    "an emulating server's TTFT and ITL against its step-time model: the sim's profiles, roofline built-ins, ITL vs batch",
  engine:
    "the matmul kernel's peak against the `tiny` model's prefill and paged decode (vs gather attention, 1 thread, float32 weights)",
  'engine-vs-llamacpp':
    "the engine's prefill and decode tokens/s vs llama.cpp (node-llama-cpp's libraries, timed in C) F32 and F16 on a SmolLM2-135M-shaped checkpoint and kjv-llama",
  failover:
    'added latency of a request retried after its decode server vanished, and of a stream resumed mid-way, vs an undisturbed one',
  kv: 'block hashing of a 128k-token prompt (sha256_cbor vs plain SHA-256) and the cache manager allocate + free',
  'kv-routing':
    "a Mooncake trace's conversations through `kvconnect proxy` to two servers, once per routing policy",
  'memory-idle':
    'a native memcpy of long-kept buffers right after N ms idle vs right after another (DAMON pageout)',
  moriio:
    'MoRIIO WRITE (layer-pipelined push) vs READ (pull after prefill) on `small`, consumers in child processes',
  offload:
    'TTFT of a repeated prompt: recompute vs CPU, fs and Redis tier hits; the Redis tier vs redis-benchmark',
  'pd-ttft':
    'TTFT of streamed requests through a P/D pair behind `kvconnect proxy` (NIXL pull/push, MoRIIO WRITE/READ; tcp, shm) vs one plain server, with a breakdown',
  'proxy-overhead':
    'latency `kvconnect proxy` adds to a NIXL-pull request vs the client calling P and D itself',
  'serve-overhead':
    'requests/s of `POST /v1/completions` (tiny, max_tokens=1) vs the same engine without HTTP',
  soak: 'the seeded P/D soak workload through the proxy vs one engine alone, with the P/D memory curve',
  transfer:
    'the transfer agent READ/WRITE over tcp and shm between two processes vs UCX, iperf3, memcpy and hashing',
  'transfer-direct':
    'same-host direct READs (or WRITEs) back to back, each paired with a native memcpy of the size',
  'transfer-warmup':
    "a fresh agent pair's one-block READ/WRITE latency, window by window, as V8 optimizes it (V8's budget vs a smaller one)",
} as const;

export type BenchName = keyof typeof BENCH_SUMMARIES;

/**
 * A number flag. `integer`: whole numbers only; `positive`: greater than 0 (otherwise 0 is
 * allowed too; no bench flag takes a negative number).
 */
export interface NumberFlag {
  type: 'number';
  default: number;
  integer: boolean;
  positive: boolean;
  description: string;
  /** The value's name in --help (default: n for integers, x otherwise). */
  value?: string;
}

export interface StringFlag {
  type: 'string';
  /** Absent: the flag is required. */
  default?: string;
  /** When given, the value must be one of these. */
  choices?: readonly string[];
  description: string;
  /** The value's name in --help (default: value, or the choices joined by |). */
  value?: string;
}

/** A switch: false unless given (`--name`, no value). */
export interface BooleanFlag {
  type: 'boolean';
  description: string;
}

export type FlagSpec = NumberFlag | StringFlag | BooleanFlag;

/** The common number flag: a count (whole, > 0). */
export function positiveInteger(dflt: number, description: string): NumberFlag {
  return { type: 'number', default: dflt, integer: true, positive: true, description };
}

/** A whole number that may be 0 (a count of optional work). */
export function nonNegativeInteger(dflt: number, description: string): NumberFlag {
  return { type: 'number', default: dflt, integer: true, positive: false, description };
}

/** A number that need not be whole; `positive`: > 0, otherwise ≥ 0. */
export function decimal(
  dflt: number,
  description: string,
  o: { positive: boolean; value?: string },
): NumberFlag {
  return { type: 'number', default: dflt, integer: false, description, ...o };
}

/** A string flag, required unless it has a default. */
export function text(description: string, o: Omit<StringFlag, 'type' | 'description'> = {}): StringFlag {
  return { type: 'string', description, ...o };
}

/** A switch: false unless given. */
export function toggle(description: string): BooleanFlag {
  return { type: 'boolean', description };
}

export type FlagSpecs = Readonly<Record<string, FlagSpec>>;

export type FlagValues<S extends FlagSpecs> = {
  -readonly [K in keyof S]: S[K] extends NumberFlag ? number : S[K] extends BooleanFlag ? boolean : string;
};

export type ParsedArgs<S extends FlagSpecs> =
  | { kind: 'values'; values: FlagValues<S> }
  | { kind: 'help'; text: string }
  | { kind: 'error'; message: string };

const HELP_FLAGS = new Set(['--help', '-h']);

/** The error line every bad command line of `bench` gets: the problem, then how to find the flags. */
export function benchUsageError(bench: string, problem: string): string {
  return `bench ${bench}: ${problem}; run 'npm run bench -- ${bench} --help' for the flags`;
}

function valueName(flag: FlagSpec): string {
  if (flag.type === 'boolean') return '';
  if (flag.value) return flag.value;
  if (flag.type === 'number') return flag.integer ? 'n' : 'x';
  return flag.choices ? flag.choices.join('|') : 'value';
}

/** What a flag's value must be, as the error messages say it ("a positive integer"). */
function expected(flag: NumberFlag | StringFlag): string {
  if (flag.type === 'string') {
    if (flag.choices) return `one of ${flag.choices.map((c) => `'${c}'`).join(', ')}`;
    return flag.value ? `a ${flag.value}` : 'a value';
  }
  if (flag.positive) return `a positive ${flag.integer ? 'integer' : 'number'}`;
  return flag.integer ? 'an integer ≥ 0' : 'a number ≥ 0';
}

const INTEGER = /^\d+$/;
const DECIMAL = /^(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** The number `raw` spells for `flag`, or null when it is not one the flag takes. */
function parseNumber(flag: NumberFlag, raw: string): number | null {
  if (!(flag.integer ? INTEGER : DECIMAL).test(raw)) return null;
  const n = Number(raw);
  if (flag.integer ? !Number.isSafeInteger(n) : !Number.isFinite(n)) return null;
  if (flag.positive && n <= 0) return null;
  return n;
}

function unknownFlag(bench: string, specs: FlagSpecs, raw: string): string {
  const names = Object.keys(specs);
  const close = closestNames(raw.replace(/^-+/, '').split('=')[0]!, names, 1)[0];
  const takes =
    names.length === 0
      ? `${bench} takes no flags`
      : close
        ? `did you mean '--${close}'?`
        : `${bench} takes ${names.map((n) => `--${n}`).join(', ')}`;
  return benchUsageError(bench, `unknown flag '${raw}' (${takes})`);
}

/** The parse error of parseArgs (strict) as a bench error: which flag, expected what, got what. */
function explain(
  bench: string,
  specs: FlagSpecs,
  args: readonly string[],
  err: Error & { code?: string },
): string {
  const named = /^(?:Unknown option|Option) '(-{1,2}[^' ]+)/.exec(err.message)?.[1];
  if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && named) return unknownFlag(bench, specs, named);
  if (err.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
    const got = /Unexpected argument '(.*)'\. /s.exec(err.message)?.[1] ?? '?';
    return benchUsageError(
      bench,
      `unexpected argument '${got}' (every argument is a flag: --name value, or --name for a switch)`,
    );
  }
  const name = named?.replace(/^-+/, '');
  const flag = name === undefined ? undefined : specs[name];
  if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && name !== undefined && flag) {
    if (flag.type === 'boolean') {
      const given = args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? '';
      return benchUsageError(
        bench,
        `--${name} is a switch and takes no value, got '${given}' (write just --${name})`,
      );
    }
    // The occurrence parseArgs stopped at: its value is missing or starts with '-'.
    const at = args.findIndex((a, i) => a === `--${name}` && (args[i + 1] ?? '-').startsWith('-'));
    const next = at >= 0 ? args[at + 1] : undefined;
    if (next === undefined) return benchUsageError(bench, `--${name} expects ${expected(flag)}, got nothing`);
    // parseArgs will not take a value starting with '-' after a space (`--rounds -1`).
    const nextName = next.startsWith('--') ? next.slice(2).split('=')[0]! : '';
    if (HELP_FLAGS.has(next) || specs[nextName]) {
      return benchUsageError(
        bench,
        `--${name} expects ${expected(flag)}, got nothing (the next argument is the flag '${next}')`,
      );
    }
    // A negative number is out of range anyway; anything else may have been meant as the value.
    if (flag.type === 'number')
      return benchUsageError(bench, `--${name} expects ${expected(flag)}, got '${next}'`);
    return benchUsageError(
      bench,
      `--${name} expects ${expected(flag)}, got '${next}' (a value starting with '-' is written --${name}=${next})`,
    );
  }
  return benchUsageError(bench, err.message.replace(/\s+/g, ' '));
}

/** The `--help` text: usage, summary, and the flags with their defaults. */
export function benchHelp(bench: string, summary: string, specs: FlagSpecs): string {
  const rows = Object.entries(specs).map(([name, flag]): [string, string] => {
    const v = valueName(flag);
    let text = flag.description;
    if (flag.type === 'number') text += ` (default: ${flag.default})`;
    else if (flag.type === 'string')
      text += flag.default === undefined ? ' (required)' : ` (default: ${flag.default})`;
    return [`--${name}${v ? ` <${v}>` : ''}`, text];
  });
  rows.push(['-h, --help', 'print this help and exit']);
  const width = Math.max(...rows.map(([left]) => left.length));
  const required = Object.entries(specs)
    .filter(([, f]) => f.type === 'string' && f.default === undefined)
    .map(([name, f]) => ` --${name} <${valueName(f)}>`)
    .join('');
  return [
    `usage: npm run bench -- ${bench}${required} [flags]`,
    '',
    summary,
    '',
    'flags:',
    ...rows.map(([left, text]) => `  ${left.padEnd(width)}  ${text}`),
    '',
    'It prints a table, then one JSON object as its last line (docs/BENCHMARKS.md).',
  ].join('\n');
}

/** Parses a bench's arguments without side effects (benchArgs prints and exits on its result). */
export function parseBenchArgs<const S extends FlagSpecs>(
  bench: string,
  summary: string,
  specs: S,
  args: readonly string[],
): ParsedArgs<S> {
  for (const name of Object.keys(specs)) {
    if (name === 'help' || !/^[a-z][a-z0-9-]*$/.test(name))
      throw new Error(`bench ${bench}: bad flag name '${name}'`);
  }
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const [name, flag] of Object.entries(specs))
    options[name] = { type: flag.type === 'boolean' ? 'boolean' : 'string' };
  let parsed: Record<string, string | boolean | undefined>;
  try {
    parsed = parseArgs({ args: [...args], options, strict: true, allowPositionals: false })
      .values as typeof parsed;
  } catch (err) {
    // --help wins over a bad command line: it is what the user needs then.
    if (args.some((a) => HELP_FLAGS.has(a))) return { kind: 'help', text: benchHelp(bench, summary, specs) };
    return { kind: 'error', message: explain(bench, specs, args, err as Error & { code?: string }) };
  }
  if (parsed['help']) return { kind: 'help', text: benchHelp(bench, summary, specs) };
  const values: Record<string, number | string | boolean> = {};
  const error = (problem: string): ParsedArgs<S> => ({
    kind: 'error',
    message: benchUsageError(bench, problem),
  });
  for (const [name, flag] of Object.entries(specs)) {
    const raw = parsed[name];
    if (flag.type === 'boolean') {
      values[name] = raw === true;
    } else if (typeof raw !== 'string') {
      if (flag.default === undefined) return error(`--${name} is required (${expected(flag)}), got nothing`);
      values[name] = flag.default;
    } else if (flag.type === 'number') {
      const n = parseNumber(flag, raw);
      if (n === null) return error(`--${name} expects ${expected(flag)}, got '${raw}'`);
      values[name] = n;
    } else {
      if (raw === '' || (flag.choices && !flag.choices.includes(raw))) {
        return error(`--${name} expects ${expected(flag)}, got '${raw}'`);
      }
      values[name] = raw;
    }
  }
  return { kind: 'values', values: values as FlagValues<S> };
}

/**
 * A bench's flags: parsed and checked against `specs`, typed. `--help` prints the help and
 * exits 0; a bad command line prints the error and exits 2, before the bench does any work.
 */
export function benchArgs<const S extends FlagSpecs>(
  bench: BenchName,
  specs: S,
  args: readonly string[],
): FlagValues<S> {
  const r = parseBenchArgs(bench, BENCH_SUMMARIES[bench], specs, args);
  if (r.kind === 'values') return r.values;
  if (r.kind === 'help') {
    process.stdout.write(`${r.text}\n`);
    process.exit(0);
  }
  process.stderr.write(`${r.message}\n`);
  process.exit(2);
}

/**
 * For a bench's own checks of its flags after benchArgs (one flag needing another, a value
 * the bench parses further): prints the problem as benchArgs prints its errors, exits 2.
 */
export function exitWithUsageError(bench: BenchName, problem: string): never {
  process.stderr.write(`${benchUsageError(bench, problem)}\n`);
  process.exit(2);
}
