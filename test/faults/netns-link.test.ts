/**
 * NIXL pull over a real link between two network namespaces (veth), P in one and D in the
 * other, each an engine in its own process:
 *  - bandwidth limited with `tc tbf` (back-pressure all the way into P's sender): the load
 *    completes token-identical while D keeps stepping local requests; with a transfer_timeout
 *    shorter than the transfer, the load fails in bounded time and D recomputes;
 *  - the link unplugged after the handshake (no FIN, no RST; TCP retransmits): the load fails
 *    within transfer_timeout and D keeps stepping;
 *  - half-open: P dies while the link is down, so its FIN/RST never reach D; when the link is
 *    back, D's next READ on its stale connection is answered with a RST and fails at once.
 *    (P's host learns nothing, so D learns only from it: a retransmitted FIN or a RST.)
 * Needs root and network namespaces; skipped otherwise, and a failure under
 * KVCONNECT_EXPECT_NETNS=1 or KVCONNECT_EXPECT_PRIVILEGED=1 (CI sets them after probing).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LLM, type LLMOptions } from '../../src/engine/llm.ts';
import { skipUnless } from '../helpers/capabilities.ts';
import { createNetnsPair, type NetnsPair, type NetnsSide } from '../helpers/netns.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { EngineChild } from './helpers/engine-child.ts';

const skip = skipUnless('netns');
const MAX_LEN = 4096;
const SENTENCE = 'Disaggregated prefill sends the KV cache of a long prompt over a slow link. ';
const LONG = SENTENCE.repeat(Math.ceil(1600 / SENTENCE.length)).slice(0, 1600);
const SHORT = [
  'The quick brown fox jumps over the lazy dog again and again.',
  'Another prompt, a bit longer than one block.',
];
const MAX_TOKENS = 4;
/** tiny: 4 layers × 2 KV heads × 32 dims × K,V × 4 bytes per token. */
const KV_BYTES_PER_TOKEN = 4 * 2 * 32 * 2 * 4;
const RATE_KBIT = 8000;
const SLACK_MS = 5000;

function nixl(
  role: 'kv_producer' | 'kv_consumer',
  side: NetnsSide,
  id: string,
  extra: Record<string, unknown>,
) {
  return {
    model: 'tiny',
    num_gpu_blocks: 300,
    max_model_len: MAX_LEN,
    kvTransferConfig: {
      kv_connector: 'NixlConnector',
      kv_role: role,
      engine_id: id,
      kv_load_failure_policy: 'recompute',
      kv_connector_extra_config: {
        backends: ['TCP'],
        side_channel_host: side.ip,
        side_channel_port: 0,
        ...extra,
      },
    },
  } as LLMOptions;
}

const children: EngineChild[] = [];
let pair: NetnsPair | null = null;
const expected = new Map<string, number[]>();

function engineIn(side: NetnsSide, options: LLMOptions): Promise<EngineChild> {
  const child = new EngineChild(options, (argv) => pair!.spawnIn(side, argv, ['pipe', 'pipe', 'inherit']));
  children.push(child);
  return child.ready();
}

describe('NIXL over a veth link between two network namespaces', { skip }, () => {
  before(async () => {
    const plain = await LLM.create({ model: 'tiny', num_gpu_blocks: 300, max_model_len: MAX_LEN });
    try {
      for (const p of [LONG, ...SHORT]) {
        expected.set(
          p,
          (await plain.generate(p, { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }))[0]!.tokenIds,
        );
      }
    } finally {
      await plain.shutdown();
    }
  });

  after(async () => {
    for (const c of children.splice(0)) await c.kill();
    pair?.destroy();
  });

  // The tests share namespaces and engines in order; each one leaves what the next uses.
  it(`a link limited to ${RATE_KBIT} kbit/s: the READ is slowed by back-pressure, completes token-identical, and D keeps stepping`, async () => {
    pair = createNetnsPair();
    pair.limit(pair.a, RATE_KBIT);
    // Started together: neither needs the other until the first request.
    const [p, d] = await Promise.all([
      engineIn(pair.a, nixl('kv_producer', pair.a, 'slow-prefill', { kv_lease_duration: 60 })),
      engineIn(pair.b, nixl('kv_consumer', pair.b, 'slow-decode', { transfer_timeout: 60 })),
    ]);
    const params = await p.prefill(LONG);
    const txBefore = pair.txBytes(pair.a);
    const remote = d.generate(LONG, MAX_TOKENS, params);
    const locals = [];
    for (let i = 0; i < 3; i++) locals.push(await d.generate(SHORT[i % 2]!, MAX_TOKENS));
    const out = await remote;
    assert.deepEqual(out.tokenIds, expected.get(LONG), 'token-identical to a single engine');
    assert.ok(out.localTokens <= 1, 'the KV came over the link');
    const kvBytes = (LONG.length + 1) * KV_BYTES_PER_TOKEN;
    const sent = pair.txBytes(pair.a) - txBefore;
    assert.ok(sent >= kvBytes, `P sent ${sent} bytes for ${kvBytes} bytes of KV`);
    const floorMs = ((kvBytes * 8) / (RATE_KBIT * 1000)) * 1000 * 0.6;
    const took = out.doneAt - out.startedAt;
    assert.ok(
      took >= floorMs,
      `the load took ${took.toFixed(0)} ms, the link allows no less than ~${floorMs.toFixed(0)}`,
    );
    for (const l of locals) {
      assert.deepEqual(l.tokenIds, expected.get(SHORT[locals.indexOf(l) % 2]!));
      assert.ok(l.doneAt < out.doneAt, 'local requests finished while the READ crawled');
    }
    await waitUntil('D to drain', async () => (await d.usage()) === 0);
    await waitUntil('P to drain', async () => (await p.usage()) === 0);
  });

  it('the same link with a transfer_timeout shorter than the transfer: bounded load error, recompute, both pools drain', async () => {
    const p = children[0]!;
    const d = await engineIn(pair!.b, nixl('kv_consumer', pair!.b, 'hasty-decode', { transfer_timeout: 1 }));
    const params = await p.prefill(LONG);
    const out = await d.generate(LONG, MAX_TOKENS, params);
    assert.deepEqual(out.tokenIds, expected.get(LONG), 'recompute gives the single-engine tokens');
    assert.ok(out.localTokens > 1, 'D recomputed the prompt');
    const failedAt = await d.loggedAt(/NIXL transfer failure/);
    assert.ok(failedAt - out.startedAt < 1000 + SLACK_MS, 'the load error came within transfer_timeout');
    await waitUntil('D to drain', async () => (await d.usage()) === 0);
    // D's release notification reaches P while P is still sending: P revokes and frees.
    await waitUntil('P to drain', async () => (await p.usage()) === 0, { timeoutMs: SLACK_MS + 5000 });
    for (const c of children.splice(0)) await c.kill();
    pair!.destroy();
    pair = null;
  });

  it('the link unplugged after the handshake: the load fails within transfer_timeout while D keeps stepping', async () => {
    pair = createNetnsPair();
    const [p, d] = await Promise.all([
      engineIn(pair.a, nixl('kv_producer', pair.a, 'cut-prefill', { kv_lease_duration: 3 })),
      engineIn(
        pair.b,
        nixl('kv_consumer', pair.b, 'cut-decode', { transfer_timeout: 2, handshake_timeout: 2 }),
      ),
    ]);
    const first = await p.prefill(SHORT[0]!);
    const second = await p.prefill(SHORT[1]!);
    const warm = await d.generate(SHORT[0]!, MAX_TOKENS, first);
    assert.deepEqual(warm.tokenIds, expected.get(SHORT[0]!));
    assert.ok(warm.localTokens <= 1, 'connected and loading before the cut');
    pair.setLink(false);
    const remote = d.generate(SHORT[1]!, MAX_TOKENS, second);
    const local = await d.generate(SHORT[0]!, MAX_TOKENS);
    const out = await remote;
    assert.ok(local.doneAt < out.doneAt, 'a local request finished during the outage');
    assert.deepEqual(out.tokenIds, expected.get(SHORT[1]!));
    assert.ok(out.localTokens > 1, 'recomputed');
    const failedAt = await d.loggedAt(/NIXL transfer failure/);
    assert.ok(failedAt - out.startedAt < 2000 + SLACK_MS, 'the load error came within transfer_timeout');
    await waitUntil('D to drain', async () => (await d.usage()) === 0);
    pair.setLink(true);
    // Nothing from D reached P: its lease frees the blocks.
    await waitUntil('P to drain', async () => (await p.usage()) === 0, { timeoutMs: 3000 + SLACK_MS });
  });

  it('half-open: P dies while the link is down; once it is back D fails at once on its stale connection, not after a timeout', async () => {
    const p = children[0]!;
    const d = await engineIn(pair!.b, nixl('kv_consumer', pair!.b, 'stale-decode', { transfer_timeout: 30 }));
    const a = await p.prefill(SHORT[0]!);
    const b = await p.prefill(SHORT[1]!);
    assert.deepEqual((await d.generate(SHORT[0]!, MAX_TOKENS, a)).tokenIds, expected.get(SHORT[0]!));
    pair!.setLink(false);
    await p.kill('SIGKILL');
    pair!.setLink(true);
    const out = await d.generate(SHORT[1]!, MAX_TOKENS, b);
    assert.deepEqual(out.tokenIds, expected.get(SHORT[1]!), 'recomputed');
    assert.ok(out.localTokens > 1);
    // P's host answers the stale connection (its retransmitted FIN, or a RST to D's READ).
    const failedAt = await d.loggedAt(/NIXL transfer failure/);
    assert.ok(failedAt - out.startedAt < 30_000 / 3, 'failed long before transfer_timeout');
    await waitUntil('D to drain', async () => (await d.usage()) === 0);
  });
});
