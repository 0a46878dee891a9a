/**
 * The test command (`npm test`, `npm run test:<area>`): runs every `*.test.ts` below test/,
 * at any depth, with node:test. Node 20's `--test` does not expand globs and npm's `sh` has
 * no `**`, so the list is built here; test/scripts/run-tests.test.ts fails when a test file
 * exists that this list misses.
 *
 *   node --import tsx scripts/run-tests.ts [--list] [--<node option> ...] [test/<folder> | test/<file>.test.ts ...]
 *
 * Paths are relative to the repository root. No path: every test file; a folder: every test
 * file below it. Arguments that start with `--` go to node (`--name=value`, e.g.
 * `--test-name-pattern=grant`); `--list` prints the files, in the order they are started
 * (runOrder), instead of running them. Tests log at `error` unless KVCONNECT_LOG_LEVEL says
 * otherwise.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Where test files live, relative to the repository root. */
export const TEST_ROOT = 'test';
export const TEST_SUFFIX = '.test.ts';
/** As many test files at once as the 2-core CI machine runs well. */
const CONCURRENCY = 2;

/**
 * The files that take longest (tens of seconds each: servers in processes of their own, faults
 * that wait for timeouts, demos, the soak), longest first. They are started before all others,
 * so that the run ends on short files rather than on one long file while the other slot idles.
 * test/scripts/run-tests.test.ts checks that each still exists.
 */
export const LONG_FILES_FIRST: readonly string[] = [
  'test/faults/soak.test.ts',
  'test/proxy/failover-kill.test.ts',
  'test/faults/netns-link.test.ts',
  'test/transfer/agent.test.ts',
  'test/connectors/moriio/faults.test.ts',
  'test/demo/demo-moriio.test.ts',
  'test/demo/demo-signals.test.ts',
  'test/connectors/nixl/hetero-tp.test.ts',
  'test/connectors/nixl/kill.test.ts',
  'test/kv-events/flat-memory.test.ts',
  'test/connectors/offloading/connector.test.ts',
  'test/connectors/offloading/tiers.test.ts',
  'test/faults/redis-cluster-failover.test.ts',
  'test/demo/demo-json.test.ts',
  'test/connectors/moriio/conformance.test.ts',
  'test/connectors/moriio/hetero-tp.test.ts',
  'test/server/metrics-scrape.test.ts',
];

/** `files` in the order they are started: those of LONG_FILES_FIRST first, in its order, then the rest. */
export function runOrder(files: readonly string[]): string[] {
  const given = new Set(files);
  const long = new Set(LONG_FILES_FIRST);
  return [...LONG_FILES_FIRST.filter((f) => given.has(f)), ...files.filter((f) => !long.has(f))];
}

function testFilesBelow(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...testFilesBelow(path));
    else if (entry.isFile() && entry.name.endsWith(TEST_SUFFIX)) out.push(path);
  }
  return out;
}

/**
 * The test files `selection` names (paths relative to the repository root: folders or test
 * files under test/; none means all of test/), as sorted repository-relative paths with `/`.
 */
export function testFiles(selection: readonly string[] = [], root = ROOT): string[] {
  const testRoot = resolve(root, TEST_ROOT);
  const files = new Set<string>();
  for (const given of selection.length === 0 ? [TEST_ROOT] : selection) {
    const abs = resolve(root, given);
    const rel = relative(testRoot, abs);
    if (rel.startsWith('..') || resolve(testRoot, rel) !== abs) {
      throw new Error(
        `run-tests: ${given} is not under ${TEST_ROOT}/; give a folder or *${TEST_SUFFIX} file there`,
      );
    }
    if (!existsSync(abs)) {
      throw new Error(
        `run-tests: ${given} does not exist; give a folder or *${TEST_SUFFIX} file under ${TEST_ROOT}/ ` +
          '(node options take the form --name=value)',
      );
    }
    if (statSync(abs).isDirectory()) {
      for (const f of testFilesBelow(abs)) files.add(f);
    } else if (abs.endsWith(TEST_SUFFIX)) {
      files.add(abs);
    } else {
      throw new Error(`run-tests: ${given} is not a test file (*${TEST_SUFFIX}) or a folder`);
    }
  }
  return [...files].map((f) => relative(root, f).split(sep).join('/')).sort();
}

function main(argv: readonly string[]): void {
  const nodeOptions = argv.filter((a) => a.startsWith('-') && a !== '--list');
  const selection = argv.filter((a) => !a.startsWith('-'));
  let files: string[];
  try {
    files = runOrder(testFiles(selection));
  } catch (err) {
    console.error((err as Error).message);
    process.exit(2);
  }
  if (files.length === 0) {
    console.error(`run-tests: no *${TEST_SUFFIX} file in ${selection.join(' ')}`);
    process.exit(2);
  }
  if (argv.includes('--list')) {
    for (const f of files) console.log(f);
    return;
  }
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', '--test', `--test-concurrency=${CONCURRENCY}`, ...nodeOptions, ...files],
    {
      cwd: ROOT,
      stdio: 'inherit',
      env: { ...process.env, KVCONNECT_LOG_LEVEL: process.env['KVCONNECT_LOG_LEVEL'] ?? 'error' },
    },
  );
  // A runner stopped by a signal stops its test run too (a Ctrl-C reaches both already).
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => child.kill(signal));
  }
  child.on('exit', (code, signal) => {
    if (signal !== null) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else {
      process.exit(code ?? 1);
    }
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
