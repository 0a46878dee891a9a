/**
 * KV core benchmark: block hashing of a 128k-token prompt (sha256_cbor, against plain
 * SHA-256 of the same token bytes as baseline, alternating, ratio per round) and allocate +
 * free throughput of the cache manager; medians of the rounds with min–max.
 * `npm run bench -- kv [--rounds 7]`
 */
import { hash } from 'node:crypto';
import { getModelPreset } from '../src/config/model-presets.ts';
import { buildKVCacheConfig, createBlockHasher, createKVCacheManager } from '../src/kv/index.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { alternate, fmt, json, loadAverage, pairwiseRatio, summarize } from './_rounds.ts';

const PROMPT_TOKENS = 128 * 1024;
const BLOCK = 16;
const REQUESTS = 10_000;
const BLOCKS_PER_REQUEST = 64;

async function timed(fn: () => void): Promise<number> {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

export async function main(args: string[]): Promise<void> {
  const { rounds } = benchArgs('kv', { rounds: positiveInteger(7, 'rounds of each measurement') }, args);
  const tokens = Array.from({ length: PROMPT_TOKENS }, (_, i) => (i * 7919) % 32000);
  const numBlocks = PROMPT_TOKENS / BLOCK;
  const hasher = createBlockHasher(BLOCK, 'sha256_cbor', {});
  const raw = new Uint32Array(tokens);
  const rawBytes = new Uint8Array(raw.buffer);
  const { a: plainRuns, b: cborRuns } = await alternate(
    rounds,
    () =>
      timed(() => {
        for (let b = 0; b < numBlocks; b++)
          hash('sha256', rawBytes.subarray(b * BLOCK * 4, (b + 1) * BLOCK * 4), 'buffer');
      }),
    () => timed(() => hasher.hashTokens(tokens)),
  );

  const kvCacheConfig = buildKVCacheConfig({
    hfConfig: getModelPreset('tiny')!.config,
    blockSize: BLOCK,
    numBlocks: BLOCKS_PER_REQUEST * 4 + 1,
    maxModelLen: BLOCKS_PER_REQUEST * BLOCK,
  });
  const m = createKVCacheManager({
    kvCacheConfig,
    enablePrefixCaching: false,
    maxModelLen: BLOCKS_PER_REQUEST * BLOCK,
  });
  const reqs = Array.from({ length: REQUESTS }, (_, i) => ({
    requestId: `r${i}`,
    allTokenIds: [] as number[],
    numTokens: BLOCKS_PER_REQUEST * BLOCK,
    blockHashes: [],
    numComputedTokens: 0,
  }));
  const allocRuns: number[] = [];
  for (let i = 0; i < rounds; i++) {
    allocRuns.push(
      await timed(() => {
        for (const r of reqs) {
          if (!m.allocateSlots(r, BLOCKS_PER_REQUEST * BLOCK)) throw new Error('pool exhausted');
          m.free(r.requestId);
        }
      }),
    );
  }
  const perSecond = (count: number, ms: number[]) => summarize(ms.map((x) => (count / x) * 1000));
  const cborRate = perSecond(numBlocks, cborRuns);
  const plainRate = perSecond(numBlocks, plainRuns);
  const ratio = pairwiseRatio(plainRuns, cborRuns);
  const allocRate = perSecond(REQUESTS * 2, allocRuns);
  console.log(
    `${rounds} rounds (hashing: baseline and sha256_cbor alternating), median (min–max); load average ${loadAverage()}`,
  );
  console.log('| case | time ms | rate |\n|---|---|---|');
  console.log(
    `| hash 128k tokens, sha256_cbor | ${fmt(summarize(cborRuns), 2)} | ${fmt(cborRate)} blocks/s |`,
  );
  console.log(
    `| baseline: plain sha256, same bytes | ${fmt(summarize(plainRuns), 2)} | ${fmt(plainRate)} blocks/s |`,
  );
  console.log(`| sha256_cbor time / baseline time, per round | ${fmt(ratio, 2)}× | |`);
  console.log(
    `| allocate+free ${REQUESTS} req × ${BLOCKS_PER_REQUEST} blocks | ${fmt(summarize(allocRuns), 2)} | ${fmt(allocRate)} ops/s |`,
  );
  console.log(
    JSON.stringify({
      bench: 'kv',
      rounds,
      load_average_1m: loadAverage(),
      hash_prompt_tokens: PROMPT_TOKENS,
      hash_blocks: numBlocks,
      hash_sha256_cbor_blocks_per_s: json(cborRate, 0),
      hash_plain_sha256_blocks_per_s: json(plainRate, 0),
      hash_time_ratio_vs_baseline: json(ratio),
      alloc_free_requests: REQUESTS,
      alloc_free_blocks_per_request: BLOCKS_PER_REQUEST,
      alloc_free_ops_per_s: json(allocRate, 0),
    }),
  );
}
