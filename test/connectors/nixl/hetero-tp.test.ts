/**
 * Heterogeneous tensor parallelism for NixlConnector pull
 * (docs/connectors/nixl.md#different-tensor-parallel-sizes-on-p-and-d-pull): D reads whole
 * producer blocks into staging and copies its head slices into its own blocks. tiny has 2 KV
 * heads, so tp=2 splits them: the head-slicing case, not the replicated one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  computeTpMapping,
  consumersPerProducer,
  planHeads,
  rankKvHeads,
  StagingPool,
  scatterHeads,
  validateRemoteGeometry,
} from '../../../src/connectors/nixl/index.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { isKVError } from '../../../src/errors/index.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { InThreadTransferAgent } from '../../../src/transfer/index.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

/** One plain engine's outputs per model and prompts, shared by the tests that need them. */
const plain = new Map<string, Promise<number[][]>>();

async function hetero(o: PairOptions, producerTp: number, consumerTp: number, prompts: string[]) {
  const key = JSON.stringify([o.model, prompts]);
  if (!plain.has(key)) plain.set(key, plainOutputs(o.model, prompts));
  const expected = plain.get(key)!;
  // The reference and both engines start together (ranks are threads: they overlap).
  const created = await Promise.allSettled([
    expected,
    LLM.create({ ...engineOptions(o, 'kv_producer', 'prefill-engine'), tensor_parallel_size: producerTp }),
    LLM.create({ ...engineOptions(o, 'kv_consumer', 'decode-engine'), tensor_parallel_size: consumerTp }),
  ] as const);
  const [, pc, dc] = created;
  if (created.some((c) => c.status === 'rejected')) {
    for (const c of [pc, dc]) if (c.status === 'fulfilled') await c.value.shutdown();
    throw (created.find((c) => c.status === 'rejected') as PromiseRejectedResult).reason;
  }
  const p = (pc as PromiseFulfilledResult<LLM>).value;
  const d = (dc as PromiseFulfilledResult<LLM>).value;
  try {
    const pOut = await p.generate(prompts, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
    for (const out of pOut) assert.equal(out.kvTransferParams?.['tp_size'], producerTp);
    const dOut = await d.generate(prompts, GREEDY, { kvTransferParams: pOut.map((x) => x.kvTransferParams) });
    assert.deepEqual(
      dOut.map((x) => x.tokenIds),
      await expected,
    );
    for (const out of dOut) {
      assert.equal(out.finishReason, 'length');
      assert.ok(out.metrics.numExternalTokens > 0, 'the prompt KV came from P');
      assert.ok(
        out.metrics.numLocalComputedTokens <= 1,
        `D computed ${out.metrics.numLocalComputedTokens} prompt tokens`,
      );
    }
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

describe('NixlConnector pull with different TP sizes (tiny: 2 KV heads)', { timeout: 60_000 }, () => {
  const prompts = [PROMPTS[0]!, PROMPTS[1]!];
  it('P tp=2 → D tp=1 over TCP: D gathers both head halves; token-identical; pools drain', () =>
    hetero({ model: 'tiny', connector: 'NixlConnector', backend: 'TCP' }, 2, 1, prompts));
  it('P tp=1 → D tp=2 over SHM: each D rank takes its head slice; token-identical; pools drain', () =>
    hetero({ model: 'tiny', connector: 'NixlConnector', backend: 'SHM' }, 1, 2, prompts));
  it('tiny-hybrid P tp=2 → D tp=1 (two KV cache groups, sliding window clipped)', () =>
    hetero({ model: 'tiny-hybrid', connector: 'NixlConnector', backend: 'TCP' }, 2, 1, [PROMPTS[2]!]));
});

describe('NixlConnector pull: TP sizes are validated at the handshake', { timeout: 30_000 }, () => {
  it('params claiming another tp_size than the producer has fail the load; D drains', async () => {
    const o: PairOptions = { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' };
    const p = await LLM.create(engineOptions(o, 'kv_producer', 'prefill-engine'));
    const d = await LLM.create(engineOptions(o, 'kv_consumer', 'decode-engine'));
    try {
      const [out] = await p.generate(
        PROMPTS[1]!,
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: P_PARAMS },
      );
      const params = { ...out!.kvTransferParams, tp_size: 2 };
      const { result, records } = await captureLogs(() =>
        d.generate(PROMPTS[1]!, GREEDY, { kvTransferParams: params }),
      );
      assert.equal(result[0]!.finishReason, 'error');
      assert.match(
        records.map((r) => r.message).join('\n'),
        /reports tensor_parallel_size 1, but its kv_transfer_params said tp_size 2/,
      );
      await waitForEmptyPool(d);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});

const geometry = (localTp: number, remoteTp: number, mode: 'pull' | 'push' = 'pull') => ({
  engineId: 'prefill-engine',
  mode,
  totalKvHeads: 2,
  local: { tpSize: localTp, blockSize: 16, blockLens: [8192 / Math.min(localTp, 2)] },
  remote: { tpSize: remoteTp, blockSize: 16, blockLens: [8192 / Math.min(remoteTp, 2)] },
});

function throwsCode(fn: () => void, code: string, message?: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(isKVError(e), String(e));
    assert.equal(e.code, code);
    if (message !== undefined) assert.equal(e.message, message);
    assert.ok(e.hint, 'the error says how to fix it');
    return true;
  });
}

describe('handshake validation of heterogeneous TP', () => {
  it("non-divisible TP sizes fail with vLLM's messages, both directions", () => {
    throwsCode(
      () => validateRemoteGeometry(geometry(3, 2)),
      'NIXL_TP_NOT_DIVISIBLE',
      'Local tensor parallel size 3 is not divisible by remote tensor parallel size 2.',
    );
    throwsCode(
      () => validateRemoteGeometry(geometry(2, 3)),
      'NIXL_TP_NOT_DIVISIBLE',
      'Remote tensor parallel size 3 is not divisible by local tensor parallel size 2.',
    );
  });

  it('divisible pairs pass when block lengths scale with the heads per rank; others fail', () => {
    for (const [l, r] of [
      [1, 1],
      [1, 2],
      [2, 1],
      [4, 2],
      [1, 4],
    ] as const) {
      validateRemoteGeometry(geometry(l, r));
    }
    const wrong = geometry(1, 2);
    throwsCode(
      () => validateRemoteGeometry({ ...wrong, remote: { ...wrong.remote, blockLens: [8192] } }),
      'NIXL_GEOMETRY_MISMATCH',
    );
    throwsCode(
      () => validateRemoteGeometry({ ...wrong, remote: { ...wrong.remote, blockSize: 32 } }),
      'NIXL_BLOCK_SIZE_MISMATCH',
    );
    throwsCode(() => validateRemoteGeometry(geometry(1, 2, 'push')), 'NIXL_HETERO_TP_PUSH_UNSUPPORTED');
    validateRemoteGeometry(geometry(2, 2, 'push'));
  });
});

describe('head plan (which producer rank feeds each local head)', () => {
  it('splits, gathers and replicates heads as the engine shards them', () => {
    assert.deepEqual(rankKvHeads(1, 2, 2), { start: 1, count: 1 });
    assert.deepEqual(rankKvHeads(3, 4, 2), { start: 1, count: 1 }, 'tp 4 > 2 heads: replicated');
    // D tp=2 from P tp=1: rank 1 takes head 1 of P's two heads.
    const split = planHeads({ localTp: 2, tpRank: 1, remoteTp: 1, totalKvHeads: 2 });
    assert.deepEqual(split.heads, [{ rank: 0, remoteIndex: 1 }]);
    assert.deepEqual([split.readRanks, split.remoteHeadsPerRank], [[0], 2]);
    // D tp=1 from P tp=2: head 0 from rank 0, head 1 from rank 1.
    const gather = planHeads({ localTp: 1, tpRank: 0, remoteTp: 2, totalKvHeads: 2 });
    assert.deepEqual(gather.heads, [
      { rank: 0, remoteIndex: 0 },
      { rank: 1, remoteIndex: 0 },
    ]);
    // GQA dedup: P tp=4 over 2 heads replicates; read ranks 0 and 2, notify all four.
    const dedup = planHeads({ localTp: 1, tpRank: 0, remoteTp: 4, totalKvHeads: 2 });
    assert.deepEqual(
      [dedup.readRanks, dedup.notifyRanks],
      [
        [0, 2],
        [0, 1, 2, 3],
      ],
    );
  });

  it('agrees with computeTpMapping on source ranks and head offsets', () => {
    for (const [localTp, remoteTp, heads] of [
      [1, 2, 2],
      [2, 1, 2],
      [4, 2, 8],
      [8, 2, 4],
      [1, 4, 2],
      [4, 1, 2],
      [2, 8, 8],
    ] as const) {
      for (let tpRank = 0; tpRank < localTp; tpRank++) {
        const plan = planHeads({ localTp, tpRank, remoteTp, totalKvHeads: heads });
        const m = computeTpMapping({ localTp, tpRank, remoteTp, totalKvHeads: heads });
        assert.deepEqual(plan.readRanks, m.sourceRanks, `${localTp}←${remoteTp} rank ${tpRank}`);
        if (localTp > remoteTp) {
          const first = plan.heads[0]!.remoteIndex;
          assert.equal(first, m.rankOffsetFactor * plan.localHeads.count, `offset ${localTp}←${remoteTp}`);
        }
        // Every producer rank frees after exactly consumersPerProducer notifications.
        assert.equal(plan.notifyRanks.length, Math.max(1, remoteTp / localTp));
      }
      const notesPerProducer = new Map<number, number>();
      for (let tpRank = 0; tpRank < localTp; tpRank++) {
        for (const r of planHeads({ localTp, tpRank, remoteTp, totalKvHeads: heads }).notifyRanks) {
          notesPerProducer.set(r, (notesPerProducer.get(r) ?? 0) + 1);
        }
      }
      assert.equal(notesPerProducer.size, remoteTp);
      for (const n of notesPerProducer.values()) assert.equal(n, consumersPerProducer(remoteTp, localTp));
    }
  });
});

describe('head scatter and staging', () => {
  it('copies strided head slices between blocks with different head counts', () => {
    const shape = { blockSize: 2, headBytes: 3 };
    // Remote block: 2 heads; value = row * 10 + head (+ byte index).
    const src = new Uint8Array(2 * 2 * 2 * 3);
    for (let row = 0; row < 4; row++)
      for (let h = 0; h < 2; h++)
        for (let i = 0; i < 3; i++) src[(row * 2 + h) * 3 + i] = row * 10 + h * 3 + i;
    const dst = new Uint8Array(5 + 4 * 3).fill(255);
    scatterHeads(shape, src, 0, 2, dst, 5, 1, [{ localIndex: 0, remoteIndex: 1 }]);
    assert.deepEqual([...dst.subarray(0, 5)], [255, 255, 255, 255, 255], 'bytes before the block untouched');
    for (let row = 0; row < 4; row++) {
      assert.deepEqual(
        [...dst.subarray(5 + row * 3, 5 + row * 3 + 3)],
        [row * 10 + 3, row * 10 + 4, row * 10 + 5],
      );
    }
  });

  it('staging hands out slots in request order and never beyond its capacity', async () => {
    const agent = await InThreadTransferAgent.create({ engineId: 'staging-test', backends: ['TCP'] });
    try {
      const pool = new StagingPool(agent, 1 << 20, 64, 4);
      assert.ok(agent.metadata().regions.some((r) => r.id === 1 << 20 && r.numBlocks === 4));
      const a = await pool.acquire(3);
      assert.deepEqual(a, [0, 1, 2]);
      let bDone: number[] | null = null;
      let cDone: number[] | null = null;
      const b = pool.acquire(2).then((s) => (bDone = s));
      const c = pool.acquire(1).then((s) => (cDone = s));
      await new Promise((r) => setImmediate(r));
      assert.equal(bDone, null, 'waits for free slots');
      assert.equal(cDone, null, 'a later small request does not overtake a waiting one');
      pool.release(a);
      await Promise.all([b, c]);
      assert.deepEqual([bDone, cDone], [[0, 1], [2]]);
      await assert.rejects(
        pool.acquire(5),
        (e: unknown) => isKVError(e) && e.code === 'NIXL_STAGING_TOO_SMALL',
      );
    } finally {
      await agent.close();
    }
  });
});
