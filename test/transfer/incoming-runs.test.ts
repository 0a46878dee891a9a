/**
 * IncomingRuns (block-io.ts), the receiving side's verdict on every block of a transfer:
 * which blocks failed, after frames that landed bad, were landed again, never arrived, or
 * were verified by the caller (a direct READ). failed() answers a clean transfer without
 * scanning its blocks, so these cases check that the count it keeps follows every change.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { IncomingRuns } from '../../src/transfer/block-io.ts';
import { blockChecksums } from '../../src/transfer/checksum.ts';
import type { DataFrame } from '../../src/transfer/messages.ts';
import { makeRegion } from './helpers/pattern.ts';

const BB = 4 << 10;

function setup() {
  const region = makeRegion(0, BB, 8, 3);
  const runs = [
    { region: 0, first: 1, count: 2 },
    { region: 0, first: 5, count: 3 },
  ];
  const incoming = new IncomingRuns(runs, new Map([[0, region]]));
  /** Lands `count` blocks of run `run` from `block`; `wrong` makes the sender's checksum of one block not match. */
  const land = (run: number, block: number, count: number, wrong?: number) => {
    const first = runs[run]!.first + block;
    const view = region.bytes.subarray(first * BB, (first + count) * BB);
    const sums = blockChecksums(view, BB, count);
    if (wrong !== undefined) sums[wrong]! += 1;
    const f: DataFrame = { type: 'data', xfer: 1, run, block, count, sums };
    incoming.landed(f, view, true);
  };
  return { incoming, land };
}

describe('IncomingRuns', () => {
  it('names the blocks that landed bad, and none once they land again verified', () => {
    const { incoming, land } = setup();
    land(0, 0, 2, 1);
    land(1, 0, 3);
    assert.ok(incoming.complete);
    assert.deepEqual(incoming.failed().positions, [[0, 1]]);
    assert.deepEqual(incoming.failed().byRegion, [{ region: 0, blockIds: [2] }]);
    land(0, 1, 1);
    assert.deepEqual(incoming.failed(), { byRegion: [], positions: [] });
    land(1, 2, 1, 0);
    assert.deepEqual(
      incoming.failed().byRegion,
      [{ region: 0, blockIds: [7] }],
      'a verified block landed bad again',
    );
  });

  it('counts blocks that never arrived as failed', () => {
    const { incoming, land } = setup();
    land(0, 0, 2);
    land(1, 1, 2);
    assert.equal(incoming.complete, false);
    assert.deepEqual(incoming.failed().byRegion, [{ region: 0, blockIds: [5] }]);
  });

  it('takes the caller’s verification of every block (a direct READ)', () => {
    const { incoming, land } = setup();
    land(0, 0, 1, 0);
    incoming.allVerified();
    assert.ok(incoming.complete);
    assert.deepEqual(incoming.failed(), { byRegion: [], positions: [] });
  });
});
