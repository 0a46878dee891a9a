/**
 * KV core benchmark: block hashing of a 128k-token prompt (sha256_cbor, against plain
 * SHA-256 of the same token bytes as baseline) and allocate + free throughput of the
 * cache manager. `npm run bench -- kv`
 */
import { hash } from 'node:crypto';
import { getModelPreset } from '../src/config/model-presets.ts';
import { buildKVCacheConfig, createBlockHasher, createKVCacheManager } from '../src/kv/index.ts';

const PROMPT_TOKENS = 128 * 1024;
const BLOCK = 16;
const REQUESTS = 10_000;
const BLOCKS_PER_REQUEST = 64;

function best(runs: number, fn: () => void): number {
  let min = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    fn();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
}

export async function main(_args: string[]): Promise<void> {
  const tokens = Array.from({ length: PROMPT_TOKENS }, (_, i) => (i * 7919) % 32000);
  const numBlocks = PROMPT_TOKENS / BLOCK;
  const hasher = createBlockHasher(BLOCK, 'sha256_cbor', {});
  const cborMs = best(7, () => hasher.hashTokens(tokens));
  const raw = new Uint32Array(tokens);
  const rawBytes = new Uint8Array(raw.buffer);
  const plainMs = best(7, () => {
    for (let b = 0; b < numBlocks; b++)
      hash('sha256', rawBytes.subarray(b * BLOCK * 4, (b + 1) * BLOCK * 4), 'buffer');
  });

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
  const allocMs = best(3, () => {
    for (const r of reqs) {
      if (!m.allocateSlots(r, BLOCKS_PER_REQUEST * BLOCK)) throw new Error('pool exhausted');
      m.free(r.requestId);
    }
  });
  const blocksPerSec = (numBlocks / cborMs) * 1000;
  const plainBlocksPerSec = (numBlocks / plainMs) * 1000;
  const opsPerSec = ((REQUESTS * 2) / allocMs) * 1000;
  const rows = [
    ['hash 128k tokens, sha256_cbor', `${cborMs.toFixed(2)} ms`, `${Math.round(blocksPerSec)} blocks/s`],
    [
      'baseline: plain sha256, same bytes',
      `${plainMs.toFixed(2)} ms`,
      `${Math.round(plainBlocksPerSec)} blocks/s`,
    ],
    ['ratio sha256_cbor / baseline', `${(cborMs / plainMs).toFixed(2)}x`, ''],
    [
      `allocate+free ${REQUESTS} req x ${BLOCKS_PER_REQUEST} blocks`,
      `${allocMs.toFixed(2)} ms`,
      `${Math.round(opsPerSec)} ops/s`,
    ],
  ];
  for (const [a, b, c] of rows) console.log(`${a!.padEnd(44)} ${b!.padStart(12)} ${c!.padStart(20)}`);
  console.log(
    JSON.stringify({
      hash_prompt_tokens: PROMPT_TOKENS,
      hash_blocks: numBlocks,
      hash_sha256_cbor_ms: Number(cborMs.toFixed(3)),
      hash_sha256_cbor_blocks_per_s: Math.round(blocksPerSec),
      hash_plain_sha256_ms: Number(plainMs.toFixed(3)),
      hash_plain_sha256_blocks_per_s: Math.round(plainBlocksPerSec),
      hash_ratio_vs_baseline: Number((cborMs / plainMs).toFixed(3)),
      alloc_free_requests: REQUESTS,
      alloc_free_blocks_per_request: BLOCKS_PER_REQUEST,
      alloc_free_ms: Number(allocMs.toFixed(3)),
      alloc_free_ops_per_s: Math.round(opsPerSec),
    }),
  );
}
