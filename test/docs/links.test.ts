/**
 * Every reference into the repo's docs resolves: `docs/<file>.md#anchor` in code comments and
 * tests, and relative Markdown links between the docs. Anchors are GitHub's heading slugs.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function files(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? files(join(dir, d.name), ext) : d.name.endsWith(ext) ? [join(dir, d.name)] : [],
  );
}

/** GitHub's slug of a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

const anchorCache = new Map<string, Set<string>>();
function problem(file: string, anchor: string | undefined, from: string): string | null {
  if (!existsSync(file)) return `${from}: ${relative(ROOT, file)} does not exist`;
  if (anchor === undefined || anchor === '') return null;
  let anchors = anchorCache.get(file);
  if (!anchors) {
    anchors = anchorsOf(readFileSync(file, 'utf8'));
    anchorCache.set(file, anchors);
  }
  return anchors.has(anchor) ? null : `${from}: ${relative(ROOT, file)} has no heading #${anchor}`;
}

test('docs/… references in source and test comments point at existing docs and headings', () => {
  const problems: string[] = [];
  let count = 0;
  for (const file of [...files(join(ROOT, 'src'), '.ts'), ...files(join(ROOT, 'test'), '.ts')]) {
    for (const m of readFileSync(file, 'utf8').matchAll(/\bdocs\/([\w./-]+\.md)(?:#([\w-]+))?/g)) {
      count++;
      const p = problem(join(ROOT, 'docs', m[1]!), m[2], relative(ROOT, file));
      if (p) problems.push(p);
    }
  }
  assert.ok(count > 50, `only ${count} references found`);
  assert.deepEqual(problems, []);
});

test('relative links between the docs (and from the README) resolve', () => {
  const problems: string[] = [];
  for (const file of [...files(join(ROOT, 'docs'), '.md'), join(ROOT, 'README.md')]) {
    const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/i.test(target)) continue;
      const [path, anchor] = target.split('#', 2) as [string, string | undefined];
      const resolved = path === '' ? file : resolve(dirname(file), path);
      if (path.endsWith('/')) {
        if (!existsSync(resolved)) problems.push(`${relative(ROOT, file)}: ${target} does not exist`);
        continue;
      }
      const p = problem(resolved, anchor, relative(ROOT, file));
      if (p) problems.push(p);
    }
  }
  assert.deepEqual(problems, []);
});

test('the slug rule matches GitHub on the headings used here', () => {
  assert.deepEqual(
    [
      ...anchorsOf(
        '# A\n## `kv_connector_extra_config` values\n### NIXL push (`NixlPushConnector`) — concurrent\n```\n# not a heading\n```\n## A\n',
      ),
    ],
    ['a', 'kv_connector_extra_config-values', 'nixl-push-nixlpushconnector--concurrent', 'a-1'],
  );
});
