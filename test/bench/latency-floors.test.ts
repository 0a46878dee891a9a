/**
 * The one-block latency floors `npm run bench -- transfer` times beside kvconnect: a bare
 * Node.js request/reply over loopback TCP (bench/_pingpong.ts), sleeping and busy-polling, and
 * UCX's tag_lat ping-pong (ucx_perftest, Debian ucx-utils; CI installs it and sets
 * KVCONNECT_EXPECT_UCX=1, so a missing tool fails there instead of skipping).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startPingPong } from '../../bench/_pingpong.ts';
import { ucxAvailable, ucxTagLatRttUs } from '../../bench/_transfer-baselines.ts';

const ucxExpected = process.env['KVCONNECT_EXPECT_UCX'] === '1';
const ucxSkip =
  ucxAvailable() || ucxExpected ? false : 'ucx_perftest not installed (apt-get install ucx-utils)';

describe('latency floors', () => {
  for (const busyPollUs of [0, 200]) {
    it(`times a bare Node.js request/reply of 64 KiB, loops ${busyPollUs ? 'polling' : 'sleeping'}`, async () => {
      const pp = await startPingPong(64 << 10, busyPollUs, 50);
      try {
        const rtts = await pp.time(200);
        assert.equal(rtts.length, 200);
        for (const us of rtts) assert.ok(us > 0 && us < 1_000_000, `a round trip of ${us} µs`);
      } finally {
        await pp.stop();
      }
    });
  }

  it('reads the round trip of UCX tag_lat over tcp and posix', { skip: ucxSkip }, async () => {
    assert.ok(ucxAvailable(), 'ucx_perftest must be installed where KVCONNECT_EXPECT_UCX=1');
    for (const transport of ['tcp', 'posix'] as const) {
      const rtt = await ucxTagLatRttUs(transport, 64 << 10, 200);
      assert.ok(Number.isFinite(rtt) && rtt > 0 && rtt < 100_000, `${transport}: ${rtt} µs`);
    }
  });
});
