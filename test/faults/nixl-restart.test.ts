/**
 * A prefill engine restarted under the same engine_id and side-channel port (what an
 * operator does with a fixed config): its transfer agent now listens on another port. The
 * decode engine must not keep using the handshake it cached for the old process.
 */
import assert from 'node:assert/strict';
import { after, it } from 'node:test';
import { LLM, type LLMOptions } from '../../src/engine/llm.ts';
import { engineOptions } from '../connectors/nixl/helpers.ts';
import { freePort } from '../helpers/free-port.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../helpers/llm.ts';
import { EngineChild } from './helpers/engine-child.ts';

const children: EngineChild[] = [];
after(async () => {
  for (const c of children.splice(0)) await c.kill();
});

it('P restarted with the same engine_id and side channel: D re-handshakes and loads from the new process', async () => {
  const sidePort = await freePort();
  const pOptions = engineOptions(
    { model: 'tiny', connector: 'NixlConnector', backend: 'TCP', extra: { side_channel_port: sidePort } },
    'kv_producer',
    'restarted-prefill',
  ) as LLMOptions;
  const startP = async () => {
    const c = new EngineChild(pOptions);
    children.push(c);
    return c.ready();
  };
  const expected = await plainOutputs('tiny', PROMPTS);
  const d = await LLM.create(
    engineOptions(
      { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' },
      'kv_consumer',
      'restart-decode',
    ),
  );
  try {
    const p1 = await startP();
    const [first] = await d.generate(PROMPTS[0]!, GREEDY, {
      kvTransferParams: await p1.prefill(PROMPTS[0]!),
    });
    assert.deepEqual(first!.tokenIds, expected[0]);
    assert.ok(first!.metrics.numLocalComputedTokens <= 1);
    await p1.kill();

    const p2 = await startP();
    for (const i of [1, 2]) {
      const [out] = await d.generate(PROMPTS[i]!, GREEDY, {
        kvTransferParams: await p2.prefill(PROMPTS[i]!),
      });
      assert.equal(out!.finishReason, 'length', `request ${i} after the restart is served`);
      assert.deepEqual(out!.tokenIds, expected[i]);
      assert.ok(out!.metrics.numLocalComputedTokens <= 1, `request ${i} loaded from the restarted P`);
    }
    await waitForEmptyPool(d);
  } finally {
    await d.shutdown();
  }
});
