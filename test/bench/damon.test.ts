/**
 * bench/_damon.ts: the transfer benchmarks' note that DAMON pageout is on, read from a DAMON
 * sysfs tree (here a real directory tree laid out as /sys/kernel/mm/damon/admin is).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { damonPageoutKdamonds, damonPageoutNote } from '../../bench/_damon.ts';

const root = mkdtempSync(join(tmpdir(), 'kvc-damon-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** A kdamond `k` with `state` and one context whose schemes have these actions. */
function kdamond(tree: string, k: number, state: string, actions: string[]): void {
  const dir = join(tree, 'kdamonds', String(k));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'state'), `${state}\n`);
  actions.forEach((action, s) => {
    const scheme = join(dir, 'contexts', '0', 'schemes', String(s));
    mkdirSync(scheme, { recursive: true });
    writeFileSync(join(scheme, 'action'), `${action}\n`);
  });
  writeFileSync(join(tree, 'kdamonds', 'nr_kdamonds'), '9\n');
}

describe('DAMON pageout note', () => {
  test('names the kdamonds that are on with a pageout scheme, and how to switch them off', () => {
    const tree = join(root, 'on');
    kdamond(tree, 0, 'on', ['stat', 'pageout']);
    kdamond(tree, 1, 'off', ['pageout']);
    kdamond(tree, 2, 'on', ['lru_prio']);
    kdamond(tree, 3, 'on', ['pageout']);
    assert.deepEqual(damonPageoutKdamonds(tree), ['0', '3']);
    const note = damonPageoutNote(tree);
    assert.ok(note?.startsWith('DAMON pageout is on (kdamond 0, 3)'), note ?? 'no note');
    assert.ok(
      note?.includes(`echo off > $f`) && note.includes(join(tree, 'kdamonds', '3', 'state')),
      note ?? undefined,
    );
  });

  test('no note without DAMON, with it off, or without a pageout scheme', () => {
    assert.equal(damonPageoutNote(join(root, 'missing')), null);
    const tree = join(root, 'quiet');
    kdamond(tree, 0, 'off', ['pageout']);
    kdamond(tree, 1, 'on', ['stat']);
    assert.deepEqual(damonPageoutKdamonds(tree), []);
    assert.equal(damonPageoutNote(tree), null);
  });
});
