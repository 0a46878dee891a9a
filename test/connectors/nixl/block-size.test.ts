/**
 * Different block sizes on P and D (NixlConnector, pull): P's smaller blocks are remapped
 * into D's (docs/connectors/nixl.md#different-block-sizes-on-p-and-d) with the token ids of
 * one plain engine, including a prefix-cache hit on D; what vLLM (or kvconnect) refuses fails
 * the handshake with an error naming the field, both sizes and the fix.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockSizeRatio } from '../../../src/connectors/nixl/block-ratio.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { isKVError } from '../../../src/errors/index.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS } from './helpers.ts';

const pair = { model: 'tiny', connector: 'NixlConnector' as const, backend: 'TCP' as const };

describe('NIXL pull with a smaller block size on P', () => {
  it('P block 8, D block 32: equal tokens, D loads the prompt, a D prefix hit reads only the rest', async () => {
    const prompts = [PROMPTS[0]!, `${PROMPTS[0]} and then some more words to read`, PROMPTS[2]!];
    const expected = await plainOutputs('tiny', prompts);
    const p = await LLM.create({ ...engineOptions(pair, 'kv_producer', 'bs-p'), block_size: 8 });
    const d = await LLM.create({ ...engineOptions(pair, 'kv_consumer', 'bs-d'), block_size: 32 });
    try {
      for (const batch of [[0], [1, 2]]) {
        const pOut = await p.generate(
          batch.map((i) => prompts[i]!),
          { ...GREEDY, maxTokens: 1 },
          { kvTransferParams: P_PARAMS },
        );
        const dOut = await d.generate(
          batch.map((i) => prompts[i]!),
          GREEDY,
          { kvTransferParams: pOut.map((o) => o.kvTransferParams) },
        );
        assert.deepEqual(
          dOut.map((o) => o.tokenIds),
          batch.map((i) => expected[i]),
        );
        for (const o of dOut) assert.equal(o.error, undefined);
        for (const o of dOut) assert.ok(o.metrics.numExternalTokens > 0, 'D loaded from P');
        if (batch[0] === 1)
          assert.ok(dOut[0]!.metrics.numLocalCachedTokens >= 32, "D's prefix cache served a block");
      }
      await waitForEmptyPool(p);
      await waitForEmptyPool(d);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });

  it("refusals name block_size, both sizes and the fix (vLLM's conditions, and TP sizes that differ)", () => {
    const base = { engineId: 'p0', mode: 'pull' as const, hybrid: false, localTp: 1, remoteTp: 1 };
    assert.equal(blockSizeRatio({ ...base, localBlockSize: 16, remoteBlockSize: 16 }), 1);
    assert.equal(blockSizeRatio({ ...base, localBlockSize: 64, remoteBlockSize: 16 }), 4);
    const refused: [Partial<typeof base> & { localBlockSize: number; remoteBlockSize: number }, RegExp][] = [
      [{ localBlockSize: 16, remoteBlockSize: 32 }, /^Only nP < nD supported currently/],
      [{ localBlockSize: 16, remoteBlockSize: 12 }, /^Only nP < nD supported currently/],
      [
        { localBlockSize: 32, remoteBlockSize: 16, mode: 'push' } as never,
        /^NixlPushConnector needs the same block size/,
      ],
      [
        { localBlockSize: 32, remoteBlockSize: 16, hybrid: true },
        /^HMA does not support different remote block size yet$/,
      ],
      [
        { localBlockSize: 32, remoteBlockSize: 16, remoteTp: 2 },
        /^Different local\/remote block sizes are not supported when P TP > D TP\.$/,
      ],
      [{ localBlockSize: 32, remoteBlockSize: 16, localTp: 2 }, /same tensor_parallel_size/],
    ];
    for (const [c, message] of refused) {
      assert.throws(
        () => blockSizeRatio({ ...base, ...c }),
        (e: unknown) => {
          assert.ok(isKVError(e));
          assert.equal(e.code, 'NIXL_BLOCK_SIZE_MISMATCH');
          assert.equal(e.field, 'block_size');
          assert.match(e.message, message);
          assert.match(
            e.hint ?? '',
            new RegExp(
              `--block-size: expected .+, received ${c.remoteBlockSize} on the prefill engine p0 and ${c.localBlockSize} here\\. .+`,
            ),
          );
          return true;
        },
      );
    }
  });

  it('a P with larger blocks fails the load with that error; recompute gives the same tokens', async () => {
    const [expected] = await plainOutputs('tiny', [PROMPTS[0]!]);
    // A short lease: D cannot reach P to release the blocks, so P frees them at its lease.
    const p = await LLM.create({
      ...engineOptions({ ...pair, extra: { kv_lease_duration: 1 } }, 'kv_producer', 'bs-p2'),
      block_size: 32,
    });
    const d = await LLM.create({
      ...engineOptions({ ...pair, policy: 'recompute' }, 'kv_consumer', 'bs-d2'),
      block_size: 16,
    });
    try {
      const [pOut] = await p.generate(
        PROMPTS[0]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      const [dOut] = await d.generate(PROMPTS[0]!, GREEDY, { kvTransferParams: pOut!.kvTransferParams });
      assert.deepEqual(dOut!.tokenIds, expected);
      assert.equal(dOut!.metrics.numExternalTokens, 0, 'nothing was loaded: D recomputed');
      await waitForEmptyPool(p, 5000);
      await waitForEmptyPool(d);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});
