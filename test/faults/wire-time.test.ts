/**
 * The time a transfer spends on the wire (`wireDuration`, `vllm:nixl_xfer_wire_time_seconds`)
 * leaves out the wait for the connection to the peer: a READ posted before the handshake
 * completed waits for it (vLLM's NIXL handshakes before it posts), and that wait is setup, not
 * transfer. The relay holds everything the owner sends after its `challenge` (its `welcome`
 * first) to make the handshake slow on purpose.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { blocksEqual } from '../transfer/helpers/pattern.ts';
import { all, closeRelayedAgents, throughRelay, whole } from './helpers/relayed-agents.ts';

setLogLevel('silent');
after(closeRelayedAgents);

const BB = 64 << 10;
const N = 8;
const HOLD_MS = 200;

for (const backend of ['TCP', 'SHM']) {
  describe(`wire time over ${backend}`, () => {
    it('a READ posted while the connection is being set up: the wait for the handshake is not time on the wire', async () => {
      let holding = true;
      const options = { backends: [backend] };
      const { a, b, ra, rb, relay, remote } = await throughRelay(
        BB,
        N,
        (dir, h) =>
          holding && dir === 'down' && h.type === 'challenge' ? { action: 'hold' } : { action: 'forward' },
        options,
        options,
      );
      b.grantRead('r', { blockIds: all(N) });
      const h = a.read(remote, whole(N), { grantKey: 'r' });
      await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
      assert.equal(a.status(h).state, 'PROC', 'the READ waited for the handshake');
      holding = false;
      relay.set('down', 'flow');
      const s = await a.waitFor(h);
      assert.equal(s.state, 'DONE', s.reason);
      assert.ok(blocksEqual(ra.bytes, 0, rb.bytes, 0, N, BB));
      const stats = a.getStats();
      const [total = 0] = stats.transferDuration;
      const [wire = 0] = stats.wireDuration;
      assert.ok(
        total >= (HOLD_MS - 5) / 1000,
        `transfer ${(total * 1000).toFixed(1)} ms, from post to completion`,
      );
      assert.ok(
        total - wire >= (HOLD_MS - 5) / 1000,
        `wire ${(wire * 1000).toFixed(1)} ms of ${(total * 1000).toFixed(1)}: the handshake wait was counted`,
      );
      assert.ok(wire >= 0);
    });
  });
}
