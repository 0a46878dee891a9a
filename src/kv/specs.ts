/**
 * Per-layer KV cache specs (vLLM's FullAttentionSpec / SlidingWindowSpec): geometry of one
 * block of one layer. Page size = K and V of `blockSize` tokens.
 */

import type { KVCacheDtype } from '../config/types.ts';
import { KVError } from '../errors/index.ts';
import { dtypeBytes } from './dtype.ts';
import type { KVCacheSpec } from './interfaces.ts';

export interface AttentionGeometry {
  blockSize: number;
  numKvHeads: number;
  headSize: number;
  dtype: KVCacheDtype;
}

export function pageSizeBytes(g: AttentionGeometry): number {
  return 2 * g.blockSize * g.numKvHeads * g.headSize * dtypeBytes(g.dtype);
}

function checkPositiveInt(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0) {
    throw new KVError('KV_INVALID_SPEC', `${name} must be a positive integer, got ${value}`, {
      hint: `Pass a positive integer ${name}.`,
      field: name,
    });
  }
}

function checkGeometry(g: AttentionGeometry): void {
  checkPositiveInt('blockSize', g.blockSize);
  checkPositiveInt('numKvHeads', g.numKvHeads);
  checkPositiveInt('headSize', g.headSize);
}

/** Full attention; `slidingWindow` is kept only when a sliding layer was promoted (HMA off). */
export function fullAttentionSpec(g: AttentionGeometry, slidingWindow: number | null = null): KVCacheSpec {
  checkGeometry(g);
  return {
    kind: 'full_attention',
    blockSize: g.blockSize,
    numKvHeads: g.numKvHeads,
    headSize: g.headSize,
    dtype: g.dtype,
    slidingWindow,
    pageSizeBytes: pageSizeBytes(g),
  };
}

export function slidingWindowSpec(g: AttentionGeometry, slidingWindow: number): KVCacheSpec {
  checkGeometry(g);
  checkPositiveInt('slidingWindow', slidingWindow);
  return {
    kind: 'sliding_window',
    blockSize: g.blockSize,
    numKvHeads: g.numKvHeads,
    headSize: g.headSize,
    dtype: g.dtype,
    slidingWindow,
    pageSizeBytes: pageSizeBytes(g),
  };
}

/** Two specs share a group only if they are identical (vLLM compares the frozen dataclasses). */
export function specKey(s: KVCacheSpec): string {
  return `${s.kind}/${s.blockSize}/${s.numKvHeads}/${s.headSize}/${s.dtype}/${s.slidingWindow ?? '-'}`;
}

export function cdiv(a: number, b: number): number {
  return Math.ceil(a / b);
}

/**
 * Blocks one request of `numTokens` holds at most in a group of this spec. Sliding-window
 * groups never need more than the window plus one scheduling step (`maxNumBatchedTokens`).
 */
export function maxBlocksPerRequest(
  spec: KVCacheSpec,
  numTokens: number,
  maxNumBatchedTokens: number,
): number {
  if (spec.kind === 'sliding_window' && spec.slidingWindow !== null) {
    const live = Math.min(spec.slidingWindow - 1 + maxNumBatchedTokens, numTokens);
    return Math.min(cdiv(live, spec.blockSize) + 1, cdiv(numTokens, spec.blockSize));
  }
  return cdiv(numTokens, spec.blockSize);
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

export function lcm(values: readonly number[]): number {
  return values.reduce((acc, v) => (acc / gcd(acc, v)) * v, 1);
}
