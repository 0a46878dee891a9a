/**
 * The benchmarks' command lines (bench/_args.ts): parsing, the error messages, --help; and
 * `bench/main.ts <name> --help` / a bad flag, which exit before any benchmark work starts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  BENCH_SUMMARIES,
  decimal,
  type FlagSpecs,
  nonNegativeInteger,
  type ParsedArgs,
  parseBenchArgs,
  positiveInteger,
  text,
  toggle,
} from '../../bench/_args.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BENCH_DIR = fileURLToPath(new URL('../../bench/', import.meta.url));

const SPEC = {
  rounds: positiveInteger(5, 'rounds'),
  'copy-threads': positiveInteger(1, 'copy threads'),
  'gap-ms': decimal(0, 'idle milliseconds', { positive: false, value: 'ms' }),
  warmup: nonNegativeInteger(100, 'warm-up rounds'),
  duration: decimal(3, 'seconds of load', { positive: true }),
  backend: text('transport', { default: 'xgmi', choices: ['xgmi', 'rdma'] }),
  policies: text('policies', { default: 'a,b', value: 'list' }),
  write: toggle('WRITEs instead of READs'),
} satisfies FlagSpecs;

const parse = (args: string[]) => parseBenchArgs('demo', 'a demo bench', SPEC, args);
const HINT = "; run 'npm run bench -- demo --help' for the flags";

function values<S extends FlagSpecs>(r: ParsedArgs<S>) {
  assert.equal(r.kind, 'values', r.kind === 'error' ? r.message : 'help');
  return (r as Extract<ParsedArgs<S>, { kind: 'values' }>).values;
}

function error(r: ParsedArgs<FlagSpecs>): string {
  assert.equal(r.kind, 'error');
  return (r as { message: string }).message;
}

describe('parseBenchArgs', () => {
  test('defaults when no flag is given', () => {
    assert.deepEqual(values(parse([])), {
      rounds: 5,
      'copy-threads': 1,
      'gap-ms': 0,
      warmup: 100,
      duration: 3,
      backend: 'xgmi',
      policies: 'a,b',
      write: false,
    });
  });

  test('values, in both --name value and --name=value forms, typed', () => {
    const v = values(
      parse([
        '--rounds',
        '7',
        '--copy-threads=2',
        '--gap-ms',
        '0',
        '--duration',
        '0.5',
        '--backend',
        'rdma',
        '--policies=kv_aware@credit=2,round_robin',
        '--write',
      ]),
    );
    const rounds: number = v.rounds;
    const write: boolean = v.write;
    const backend: string = v.backend;
    assert.deepEqual(
      { rounds, write, backend, ct: v['copy-threads'], gap: v['gap-ms'], d: v.duration, p: v.policies },
      { rounds: 7, write: true, backend: 'rdma', ct: 2, gap: 0, d: 0.5, p: 'kv_aware@credit=2,round_robin' },
    );
  });

  test('an unknown flag is an error that suggests the flag meant', () => {
    assert.equal(
      error(parse(['--copy-thread', '2'])),
      `bench demo: unknown flag '--copy-thread' (did you mean '--copy-threads'?)${HINT}`,
    );
    assert.equal(
      error(parse(['--bogus'])),
      'bench demo: unknown flag ' +
        "'--bogus' (demo takes --rounds, --copy-threads, --gap-ms, --warmup, --duration, --backend, --policies, --write)" +
        HINT,
    );
    assert.match(error(parse(['-x'])), /^bench demo: unknown flag '-x' /);
  });

  test('a bad number names the flag, what it expects and what it got', () => {
    for (const bad of ['abc', '0', '2.5', '', '1e3', '0x10', ' 5']) {
      assert.equal(
        error(parse(['--rounds', bad])),
        `bench demo: --rounds expects a positive integer, got '${bad}'${HINT}`,
      );
    }
    assert.equal(
      error(parse(['--rounds', '-1'])),
      `bench demo: --rounds expects a positive integer, got '-1'${HINT}`,
    );
    assert.equal(
      error(parse(['--rounds=-1'])),
      `bench demo: --rounds expects a positive integer, got '-1'${HINT}`,
    );
    assert.equal(
      error(parse(['--duration', '0'])),
      `bench demo: --duration expects a positive number, got '0'${HINT}`,
    );
    assert.equal(
      error(parse(['--gap-ms', 'soon'])),
      `bench demo: --gap-ms expects a number ≥ 0, got 'soon'${HINT}`,
    );
    assert.equal(
      error(parse(['--gap-ms', '-5'])),
      `bench demo: --gap-ms expects a number ≥ 0, got '-5'${HINT}`,
    );
    assert.equal(values(parse(['--gap-ms', '1.5']))['gap-ms'], 1.5);
    // A count that may be 0: 0 is taken, a fraction or a negative number is not.
    assert.equal(values(parse(['--warmup', '0'])).warmup, 0);
    for (const bad of ['-1', '2.5', 'many']) {
      assert.equal(
        error(parse([`--warmup=${bad}`])),
        `bench demo: --warmup expects an integer ≥ 0, got '${bad}'${HINT}`,
      );
    }
  });

  test('a flag without its value', () => {
    assert.equal(
      error(parse(['--rounds'])),
      `bench demo: --rounds expects a positive integer, got nothing${HINT}`,
    );
    assert.equal(
      error(parse(['--rounds', '--write'])),
      `bench demo: --rounds expects a positive integer, got nothing (the next argument is the flag '--write')${HINT}`,
    );
    assert.equal(
      error(parse(['--policies', '-a'])),
      `bench demo: --policies expects a list, got '-a' (a value starting with '-' is written --policies=-a)${HINT}`,
    );
  });

  test('strings with choices, and empty strings', () => {
    assert.equal(
      error(parse(['--backend', 'nvlink'])),
      `bench demo: --backend expects one of 'xgmi', 'rdma', got 'nvlink'${HINT}`,
    );
    assert.equal(error(parse(['--policies='])), `bench demo: --policies expects a list, got ''${HINT}`);
  });

  test('booleans: false unless given, and they take no value', () => {
    assert.equal(values(parse([])).write, false);
    assert.equal(values(parse(['--write'])).write, true);
    assert.equal(
      error(parse(['--write=1'])),
      `bench demo: --write is a switch and takes no value, got '1' (write just --write)${HINT}`,
    );
  });

  test('positional arguments are errors', () => {
    assert.equal(
      error(parse(['5'])),
      `bench demo: unexpected argument '5' (every argument is a flag: --name value, or --name for a switch)${HINT}`,
    );
  });

  test('a required string flag', () => {
    const spec = { trace: text('the trace', { value: 'path' }), rounds: positiveInteger(5, 'rounds') };
    assert.equal(
      error(parseBenchArgs('demo', 's', spec, [])),
      `bench demo: --trace is required (a path), got nothing${HINT}`,
    );
    assert.equal(values(parseBenchArgs('demo', 's', spec, ['--trace', 't.jsonl'])).trace, 't.jsonl');
    const help = parseBenchArgs('demo', 's', spec, ['--help']);
    assert.equal(help.kind, 'help');
    assert.match((help as { text: string }).text, /^usage: npm run bench -- demo --trace <path> \[flags\]$/m);
    assert.match((help as { text: string }).text, /--trace <path> {2}the trace \(required\)$/m);
  });

  test('--help and -h: the summary and every flag with its default, even after a bad flag', () => {
    for (const args of [
      ['--help'],
      ['-h'],
      ['--rounds', '3', '--help'],
      ['--bogus', '-h'],
      ['--rounds', 'x', '-h'],
    ]) {
      const r = parse(args);
      assert.equal(r.kind, 'help', args.join(' '));
      const help = (r as { text: string }).text;
      assert.match(help, /^usage: npm run bench -- demo \[flags\]\n\na demo bench\n/);
      assert.match(help, /^ {2}--rounds <n> +rounds \(default: 5\)$/m);
      assert.match(help, /^ {2}--copy-threads <n> +copy threads \(default: 1\)$/m);
      assert.match(help, /^ {2}--gap-ms <ms> +idle milliseconds \(default: 0\)$/m);
      assert.match(help, /^ {2}--duration <x> +seconds of load \(default: 3\)$/m);
      assert.match(help, /^ {2}--backend <xgmi\|rdma> +transport \(default: xgmi\)$/m);
      assert.match(help, /^ {2}--policies <list> +policies \(default: a,b\)$/m);
      assert.match(help, /^ {2}--write +WRITEs instead of READs$/m);
      assert.match(help, /^ {2}-h, --help +print this help and exit$/m);
    }
  });
});

describe('the benches', () => {
  const benches = readdirSync(BENCH_DIR)
    .filter((f) => f.endsWith('.ts') && f !== 'main.ts' && !f.startsWith('_'))
    .map((f) => f.slice(0, -3))
    .sort();

  test('every bench has a summary and declares its flags with benchArgs under its own name', () => {
    assert.deepEqual(Object.keys(BENCH_SUMMARIES).sort(), benches);
    for (const name of benches) {
      const source = readFileSync(`${BENCH_DIR}${name}.ts`, 'utf8');
      assert.deepEqual(
        [...source.matchAll(/benchArgs\(\s*'([^']+)'/g)].map((m) => m[1]),
        [name],
        `${name}.ts calls benchArgs('${name}', ...) once`,
      );
      assert.doesNotMatch(source, /args\.(includes|indexOf)\(/, `${name}.ts parses no flag by hand`);
    }
  });
});

/** Runs `node --import tsx bench/main.ts ...args`; it must exit on its own (before any work). */
function bench(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'bench/main.ts', ...args],
      { cwd: ROOT, timeout: 20_000, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err?.killed)
          reject(new Error(`bench ${args.join(' ')} did not exit on its own: it ran the benchmark`));
        else resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout, stderr });
      },
    );
  });
}

describe('bench/main.ts', { concurrency: 2 }, () => {
  test('transfer --help prints its flags and exits 0', async () => {
    const r = await bench('transfer', '--help');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^usage: npm run bench -- transfer \[flags\]/);
    for (const flag of [
      'layers',
      'block-kib',
      'blocks',
      'rounds',
      'latency-samples',
      'chunk-kib',
      'ucx-tcp-mib',
      'copy-threads',
      'warmup-rounds',
    ]) {
      assert.match(r.stdout, new RegExp(`^ {2}--${flag} <n> .*\\(default: \\d+\\)$`, 'm'), flag);
    }
    assert.equal(r.stderr, '');
  });

  test('engine -h and kv-routing --help (which needs --trace otherwise) exit 0 with their flags', async () => {
    const engine = await bench('engine', '-h');
    assert.equal(engine.code, 0, engine.stderr);
    assert.match(engine.stdout, /--decode-steps <n> +.*\(default: 32\)/);
    const routing = await bench('kv-routing', '--help');
    assert.equal(routing.code, 0, routing.stderr);
    assert.match(routing.stdout, /--time-scale <x> +.*\(default: 0\.02\)/);
    assert.match(routing.stdout, /--trace <path> +.*\(required\)/);
  });

  test('transfer --rounds abc exits 2 and says what is wrong', async () => {
    const r = await bench('transfer', '--rounds', 'abc');
    assert.equal(r.code, 2);
    assert.equal(
      r.stderr,
      "bench transfer: --rounds expects a positive integer, got 'abc'; run 'npm run bench -- transfer --help' for the flags\n",
    );
    assert.equal(r.stdout, '');
  });

  test('transfer-direct --hashed without --write exits 2', async () => {
    const r = await bench('transfer-direct', '--hashed');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^bench transfer-direct: --hashed applies to WRITEs only, got it without --write/);
  });

  test('--help lists every bench with its summary; an unknown bench exits 2', async () => {
    const r = await bench('--help');
    assert.equal(r.code, 0, r.stderr);
    for (const [name, summary] of Object.entries(BENCH_SUMMARIES)) {
      assert.ok(r.stdout.includes(`${name} `) && r.stdout.includes(summary), name);
    }
    const unknown = await bench('trasfer');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^bench: unknown benchmark 'trasfer' \(did you mean 'transfer'\?\)/);
  });
});
