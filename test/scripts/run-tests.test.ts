/**
 * The test command runs every test file. `npm test` is asked, through npm as CI asks it, which
 * files it runs; a walk of the whole repository for files named like tests must find exactly
 * those, all `*.test.ts` under test/. Each top-level area of test/ has its `npm run test:<area>`,
 * and the test paths the docs and comments name exist.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import {
  LONG_FILES_FIRST,
  ROOT,
  runOrder,
  TEST_ROOT,
  TEST_SUFFIX,
  testFiles,
} from '../../scripts/run-tests.ts';

const run = promisify(execFile);

/** Never searched: dependencies, git's own files, build output. */
const SKIP = new Set(['node_modules', '.git', 'dist', 'dist-check']);
/** What node:test, or a reader, takes for a test file: `x.test.ts`, `x-test.mjs`, `x_test.js`, ... */
const NAMED_LIKE_A_TEST = /[._-]test\.[cm]?[jt]sx?$/;

function walk(dir: string, keep: (name: string) => boolean): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    if (SKIP.has(d.name)) return [];
    const path = join(dir, d.name);
    if (d.isDirectory()) return walk(path, keep);
    return d.isFile() && keep(d.name) ? [relative(ROOT, path).split(sep).join('/')] : [];
  });
}

function difference(a: readonly string[], b: readonly string[]): string[] {
  const other = new Set(b);
  return a.filter((x) => !other.has(x));
}

test('`npm test` runs every test file of the repository, each once, all under test/', async () => {
  const { stdout } = await run('npm', ['test', '--silent', '--', '--list'], { cwd: ROOT });
  const listed = stdout.split('\n').filter((l) => l !== '');
  const found = walk(ROOT, (name) => NAMED_LIKE_A_TEST.test(name)).sort();

  assert.ok(listed.includes(`${TEST_ROOT}/scripts/run-tests.test.ts`), `npm test lists this file: ${stdout}`);
  assert.equal(new Set(listed).size, listed.length, 'no file is listed twice');
  const misplaced = listed.filter((f) => !f.startsWith(`${TEST_ROOT}/`) || !f.endsWith(TEST_SUFFIX));
  assert.deepEqual(misplaced, [], `npm test runs only *${TEST_SUFFIX} files under ${TEST_ROOT}/`);
  assert.deepEqual(
    difference(found, listed),
    [],
    `these test files are not run by npm test: name them *${TEST_SUFFIX} and put them under ${TEST_ROOT}/`,
  );
  assert.deepEqual(difference(listed, found), [], 'npm test lists files that do not exist');
});

test('CI runs exactly `npm test`', () => {
  assert.match(readFileSync(join(ROOT, '.ci/run'), 'utf8'), /^npm test$/m);
});

test('each top-level area of test/ has `npm run test:<area>`, the test command on that area', () => {
  const scripts = (
    JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  ).scripts;
  const command = scripts['test'];
  assert.ok(command);
  const expected: Record<string, string> = {};
  for (const d of readdirSync(join(ROOT, TEST_ROOT), { withFileTypes: true })) {
    const path = `${TEST_ROOT}/${d.name}`;
    if (d.isDirectory() ? testFiles([path]).length > 0 : d.name.endsWith(TEST_SUFFIX)) {
      expected[`test:${d.name.replace(TEST_SUFFIX, '')}`] = `${command} ${path}`;
    }
  }
  const actual = Object.fromEntries(Object.entries(scripts).filter(([name]) => name.startsWith('test:')));
  assert.deepEqual(actual, expected);
  const covered = Object.values(expected).flatMap((s) => testFiles([s.slice(command.length + 1)]));
  assert.deepEqual(covered.sort(), testFiles());
});

test('the test command takes only folders and test files under test/, and says what it expects', () => {
  assert.throws(
    () => testFiles(['src']),
    /run-tests: src is not under test\/; give a folder or \*\.test\.ts file there/,
  );
  assert.throws(() => testFiles(['test/../bench']), /is not under test\//);
  assert.throws(() => testFiles([`${TEST_ROOT}/no-such-area`]), /no-such-area does not exist/);
  assert.throws(
    () => testFiles(['test/helpers/wait-until.ts']),
    /is not a test file \(\*\.test\.ts\) or a folder/,
  );
  // A file named on its own and through its folder runs once.
  const both = testFiles(['test/scripts/run-tests.test.ts', 'test/scripts']);
  assert.deepEqual(both, testFiles(['test/scripts']));
  assert.equal(both.filter((f) => f === 'test/scripts/run-tests.test.ts').length, 1);
});

test('the test paths that docs, CI and comments name exist', () => {
  const texts = [
    ...walk(join(ROOT, 'docs'), (n) => n.endsWith('.md')),
    'README.md',
    '.ci/run',
    ...['src', 'test', 'bench', 'scripts'].flatMap((d) =>
      walk(join(ROOT, d), (n) => /\.(ts|mjs|py|md)$/.test(n)),
    ),
  ];
  const missing: string[] = [];
  let count = 0;
  for (const file of texts) {
    for (const m of readFileSync(join(ROOT, file), 'utf8').matchAll(/(?<![\w/.-])test\/[\w./-]*[\w/]/g)) {
      count++;
      if (!existsSync(join(ROOT, m[0]))) missing.push(`${file}: ${m[0]}`);
    }
  }
  assert.ok(count > 50, `only ${count} test paths found`);
  assert.deepEqual(missing, []);
});

test('the longest test files are started first, in the order listed, and each of them exists', () => {
  const all = testFiles();
  assert.deepEqual(
    difference([...LONG_FILES_FIRST], all),
    [],
    'LONG_FILES_FIRST names files that are not test files',
  );
  assert.equal(new Set(LONG_FILES_FIRST).size, LONG_FILES_FIRST.length, 'no file is named twice');
  const order = runOrder(all);
  assert.deepEqual(order.slice(0, LONG_FILES_FIRST.length), [...LONG_FILES_FIRST]);
  assert.deepEqual([...order].sort(), all, 'every file runs once');
  const some = ['test/util/lru-map.test.ts', LONG_FILES_FIRST[1]!, 'test/architecture.test.ts'];
  assert.deepEqual(runOrder(some), [
    LONG_FILES_FIRST[1],
    'test/util/lru-map.test.ts',
    'test/architecture.test.ts',
  ]);
});
