/**
 * scripts/docker-steps.ts reads the Dockerfile as Docker does (continuations, global ARGs in
 * FROM, exec and shell forms, .dockerignore patterns), and the Dockerfile it reads keeps its
 * contract: Node 20 slim stages, the native addon built and loaded in the build stage, a runtime
 * stage that copies only what serve and proxy load, and nothing in the context it must not send.
 * Running the steps takes minutes (npm ci): docs/deploy.md has the command and its last result.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { aptPackages, dockerIgnore, execForm, parseDockerfile } from '../../scripts/docker-steps.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

test('the parser: continuations, comments inside them, global ARGs in FROM, stage names', () => {
  const stages = parseDockerfile(
    [
      'ARG BASE=node:20-bookworm-slim',
      '# a comment',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile's ${VAR}, not a template
      'FROM ${BASE} AS build',
      'RUN apt-get update \\',
      '# inside a continuation',
      ' && apt-get install -y --no-install-recommends python3 g++ \\',
      ' && rm -rf /var/lib/apt/lists/*',
      'WORKDIR /src',
      'FROM $BASE',
      'COPY --from=build /src/dist ./dist',
      'ENTRYPOINT ["node", "/app/dist/cli/main.js"]',
    ].join('\n'),
  );
  assert.deepEqual(
    stages.map((s) => [s.name, s.base, s.steps.map((x) => x.op)]),
    [
      ['build', 'node:20-bookworm-slim', ['RUN', 'WORKDIR']],
      ['1', 'node:20-bookworm-slim', ['COPY', 'ENTRYPOINT']],
    ],
  );
  const run = stages[0]?.steps[0];
  assert.equal(run?.line, 4);
  assert.deepEqual(aptPackages(run?.args ?? ''), ['python3', 'g++']);
  assert.equal(aptPackages('npm ci'), null);
  assert.deepEqual(execForm('["node", "/app/x.js"]'), ['node', '/app/x.js']);
  assert.deepEqual(execForm('--from=build /src/a ./a'), ['--from=build', '/src/a', './a']);
  assert.throws(() => parseDockerfile('RUN true'), /RUN before FROM/);
});

test('.dockerignore patterns: paths, their contents, * within a segment, ** across', () => {
  const ignored = dockerIgnore('# c\nnode_modules\nnative/build\nmodels/*/train-state.pt*\n**/__pycache__\n');
  for (const p of [
    'node_modules',
    'node_modules/x/y.js',
    'native/build/Release/kvshm.node',
    'models/kjv-llama/train-state.pt.1',
    'scripts/train/__pycache__/a.pyc',
  ]) {
    assert.ok(ignored(p), p);
  }
  for (const p of ['native/kvshm.c', 'models/kjv-llama/model.safetensors', 'src/node_modules_like.ts']) {
    assert.ok(!ignored(p), p);
  }
  assert.throws(() => dockerIgnore('!keep'), /syntax this script does not read/);
});

test('the Dockerfile: Node 20 slim, addon built and loaded at build, runtime holds only what serve and proxy load', () => {
  const stages = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
  assert.deepEqual(
    stages.map((s) => s.name),
    ['build', 'runtime'],
  );
  for (const s of stages) assert.match(s.base, /^node:20-[a-z]+-slim$/);
  const [build, runtime] = stages as [(typeof stages)[0], (typeof stages)[0]];
  const runs = build.steps.filter((s) => s.op === 'RUN').map((s) => s.args);
  assert.ok(runs.includes('npm ci'), 'npm ci builds the addon and dist/');
  assert.ok(
    runs.some((r) => r.includes('native-addon.js') && r.includes('process.exit(1)')),
    'the build fails without the addon',
  );
  assert.ok(runs.includes('npm prune --omit=dev'));
  const copied = runtime.steps.filter((s) => s.op === 'COPY').map((s) => execForm(s.args).at(-1));
  assert.deepEqual(copied, [
    './package.json',
    './node_modules',
    './dist',
    './native/build/Release/kvshm.node',
    './models/kjv-llama',
  ]);
  assert.ok(
    runtime.steps.some((s) => s.op === 'USER' && s.args === 'node'),
    'not root',
  );
  const ignored = dockerIgnore(readFileSync(join(ROOT, '.dockerignore'), 'utf8'));
  for (const p of ['node_modules', 'dist', 'native/build', '.git', 'test']) assert.ok(ignored(p), p);
  for (const p of [
    'src/index.ts',
    'native/kvshm.c',
    'scripts/build-native.mjs',
    'models/kjv-llama/config.json',
  ]) {
    assert.ok(!ignored(p), p);
  }
});
