/**
 * Per-request block hashing (vLLM's request block hasher): appends the hashes of the full
 * blocks of a growing request, chaining from its last hash. Extra keys per block, in vLLM's
 * order: LoRA name, multimodal items overlapping the block, cache salt (first block only).
 */

import type { HashAlgo } from '../config/types.ts';
import type { Environment } from '../util/envs.ts';
import { BlockHashFunction, DEFAULT_HASH_ALGO } from './block-hash.ts';
import type { ExtraKey } from './cbor-block-key.ts';
import type { BlockHash } from './interfaces.ts';

/** A multimodal item placed at token positions [offset, offset + length). */
export interface MultiModalPlaceholder {
  /** Content hash of the item. */
  identifier: string;
  offset: number;
  length: number;
}

export interface HashableRequest {
  readonly allTokenIds: readonly number[];
  readonly blockHashes: readonly BlockHash[];
  readonly cacheSalt?: string | undefined;
  readonly loraName?: string | undefined;
  readonly mmPlaceholders?: readonly MultiModalPlaceholder[] | undefined;
}

export function blockExtraKeys(req: HashableRequest, start: number, end: number): ExtraKey[] | null {
  const keys: ExtraKey[] = [];
  if (req.loraName) keys.push(req.loraName);
  for (const mm of req.mmPlaceholders ?? []) {
    if (mm.offset < end && mm.offset + mm.length > start) keys.push([mm.identifier, mm.offset - start]);
  }
  if (start === 0 && req.cacheSalt) keys.push(req.cacheSalt);
  return keys.length > 0 ? keys : null;
}

export class BlockHasher {
  readonly blockSize: number;
  readonly fn: BlockHashFunction;

  constructor(blockSize: number, algo: HashAlgo = DEFAULT_HASH_ALGO, env?: Environment) {
    this.blockSize = blockSize;
    this.fn = new BlockHashFunction(algo, env);
  }

  get algo(): HashAlgo {
    return this.fn.algo;
  }

  /** Hashes of the full blocks not yet in `req.blockHashes` (the caller appends them). */
  newHashes(req: HashableRequest): BlockHash[] {
    const out: BlockHash[] = [];
    const tokens = req.allTokenIds;
    const bs = this.blockSize;
    let parent = req.blockHashes.at(-1) ?? null;
    const plain = !req.loraName && !req.cacheSalt && !req.mmPlaceholders?.length;
    for (let start = req.blockHashes.length * bs; start + bs <= tokens.length; start += bs) {
      const extra = plain ? null : blockExtraKeys(req, start, start + bs);
      parent = this.fn.hashBlock(parent, tokens, start, start + bs, extra);
      out.push(parent);
    }
    return out;
  }

  /** Appends the new full-block hashes to a mutable `blockHashes` array; returns how many. */
  update(req: HashableRequest & { blockHashes: BlockHash[] }): number {
    const added = this.newHashes(req);
    for (const h of added) req.blockHashes.push(h);
    return added.length;
  }

  /** All block hashes of a token sequence (no extra keys). */
  hashTokens(tokens: readonly number[]): BlockHash[] {
    return this.newHashes({ allTokenIds: tokens, blockHashes: [] });
  }
}

export function createBlockHasher(
  blockSize: number,
  algo: HashAlgo = DEFAULT_HASH_ALGO,
  env?: Environment,
): BlockHasher {
  return new BlockHasher(blockSize, algo, env);
}
