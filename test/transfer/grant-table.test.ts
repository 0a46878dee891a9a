/**
 * GrantTable.check (grants.ts): a grant covers a transfer only when every block of every run
 * is granted, in a region the grant names, to this peer. A transfer names the same runs in
 * each of its regions and check() looks each run up once, so these cases vary one run in one
 * region and expect the refusal.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GrantTable } from '../../src/transfer/grants.ts';

const me = { agentName: 'D-rank0', engineId: 'D' };
const runs = (...rs: [number, number, number][]) =>
  rs.map(([region, first, count]) => ({ region, first, count }));

describe('GrantTable.check', () => {
  it('covers runs repeated in every region, and refuses a run that differs in one region', () => {
    const t = new GrantTable();
    t.add('write', 'w', { blockIds: [4, 5, 6, 9], peer: 'D' });
    assert.equal(
      t.check('write', me, runs([0, 4, 3], [1, 4, 3], [2, 4, 3], [0, 9, 1], [1, 9, 1]), 'w'),
      null,
    );
    assert.match(
      t.check('write', me, runs([0, 4, 3], [1, 4, 4]), 'w')?.reason ?? '',
      /does not cover/,
      'block 7 in region 1',
    );
    assert.match(
      t.check('write', me, runs([0, 4, 3], [1, 3, 3]), 'w')?.reason ?? '',
      /does not cover/,
      'block 3 in region 1',
    );
    assert.match(
      t.check('write', me, runs([0, 4, 3], [1, 4, 3], [1, 8, 2]), undefined)?.reason ?? '',
      /no live write grant covers/,
    );
    assert.equal(t.check('write', me, runs([0, 4, 3], [1, 4, 3], [1, 9, 1]), undefined), null);
  });

  it('refuses a region the grant does not name, even for a run it covers in another region', () => {
    const t = new GrantTable();
    t.add('read', 'r', { blockIds: [1, 2], regions: [0, 1] });
    assert.equal(t.check('read', me, runs([0, 1, 2], [1, 1, 2]), 'r'), null);
    assert.match(t.check('read', me, runs([0, 1, 2], [2, 1, 2]), 'r')?.reason ?? '', /does not cover/);
  });

  it('refuses another peer', () => {
    const t = new GrantTable();
    t.add('read', 'r', { blockIds: [1, 2], peer: 'E' });
    assert.match(t.check('read', me, runs([0, 1, 2]), 'r')?.reason ?? '', /does not cover/);
  });
});
