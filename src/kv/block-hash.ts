/**
 * Prefix-cache block hashing
 * (docs/kv-cache.md#hashing-createblockhasherblocksize-algo--sha256_cbor): hash_i =
 * H([hash_{i-1}, tokens_i, extra_keys]), seeded with NONE_HASH. Every algorithm encodes the
 * tuple as canonical CBOR:
 * - sha256_cbor: SHA-256 of the CBOR bytes, identical to vLLM's keys (language-neutral).
 * - sha256: accepted name; vLLM's sha256 hashes Python pickle bytes, which cannot be
 *   reproduced here, so kvconnect's sha256 is the CBOR encoding too (does NOT match vLLM).
 * - xxhash / xxhash_cbor: MurmurHash3 x86_128 of the CBOR bytes: fast, not collision
 *   resistant, in-process only (the cache manager verifies token ids on every hit).
 */
import { hash, randomBytes } from 'node:crypto';
import type { HashAlgo } from '../config/types.ts';
import { KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { CborBlockKeyWriter, type ExtraKey } from './cbor-block-key.ts';
import type { BlockHash } from './interfaces.ts';
import { murmur3x86_128 } from './murmur3.ts';

export const DEFAULT_HASH_ALGO: HashAlgo = 'sha256_cbor';
export const DEFAULT_NONE_HASH_SEED = 'vllm-none-hash';
const HASH_ALGOS: readonly HashAlgo[] = ['sha256', 'sha256_cbor', 'xxhash', 'xxhash_cbor'];
const log = getLogger('kvconnect.kv.block-hash');

export function isHashAlgo(name: string): name is HashAlgo {
  return (HASH_ALGOS as readonly string[]).includes(name);
}

/** Non-cryptographic algorithms: hits must be verified against the block's token ids. */
export function isCollisionResistant(algo: HashAlgo): boolean {
  return algo === 'sha256' || algo === 'sha256_cbor';
}

type Digest = (bytes: Uint8Array) => Uint8Array;

function digestFor(algo: HashAlgo): Digest {
  if (!isHashAlgo(algo)) {
    throw new KVError('KV_UNKNOWN_HASH_ALGO', `Unsupported hash algorithm: ${String(algo)}`, {
      field: 'cache.prefix_caching_hash_algo',
      hint: `Use one of ${HASH_ALGOS.join(', ')}.`,
    });
  }
  if (isCollisionResistant(algo)) return (bytes) => hash('sha256', bytes, 'buffer');
  return (bytes) => murmur3x86_128(bytes);
}

const noneHashCache = new Map<string, BlockHash>();

/**
 * NONE_HASH: H(seed) with seed = env PYTHONHASHSEED if set, else "vllm-none-hash" for the
 * SHA-256 algorithms, else a random per-process seed (with vLLM's warning).
 */
export function noneHash(algo: HashAlgo, env?: Environment): BlockHash {
  const fromEnv = readEnv('PYTHONHASHSEED', env);
  let seed: string;
  if (fromEnv !== undefined) seed = fromEnv;
  else if (isCollisionResistant(algo)) seed = DEFAULT_NONE_HASH_SEED;
  else {
    const cached = noneHashCache.get(`random:${algo}`);
    if (cached) return cached;
    log.warnOnce(
      'Using a random per-process NONE_HASH seed because %s is not collision resistant. Block hashes are ' +
        'therefore not reproducible across processes; set PYTHONHASHSEED to a shared value to reuse the ' +
        'prefix cache across instances, or use sha256.',
      algo,
    );
    const random = randomBytes(32).toString('hex');
    const value = digestFor(algo)(new CborBlockKeyWriter().encodeText(random));
    noneHashCache.set(`random:${algo}`, value);
    return value;
  }
  const key = `${algo}:${seed}`;
  let value = noneHashCache.get(key);
  if (!value) {
    value = Uint8Array.from(digestFor(algo)(new CborBlockKeyWriter().encodeText(seed)));
    noneHashCache.set(key, value);
  }
  return value;
}

/** External 64-bit form used in KV events and store keys: low 64 bits, big-endian. */
export function externalBlockHash(h: BlockHash): bigint {
  const view = new DataView(h.buffer, h.byteOffset, h.byteLength);
  return view.getBigUint64(h.byteLength - 8, false);
}

export function blockHashHex(h: BlockHash): string {
  return Buffer.from(h.buffer, h.byteOffset, h.byteLength).toString('hex');
}

/** Stable string key of a hash for Maps. */
export function blockHashKey(h: BlockHash): string {
  return Buffer.from(h.buffer, h.byteOffset, h.byteLength).toString('latin1');
}

/** Hashes single blocks; reuses one encode buffer (not re-entrant, one per thread). */
export class BlockHashFunction {
  readonly algo: HashAlgo;
  readonly noneHash: BlockHash;
  readonly #digest: Digest;
  readonly #writer = new CborBlockKeyWriter();

  constructor(algo: HashAlgo = DEFAULT_HASH_ALGO, env?: Environment) {
    this.#digest = digestFor(algo);
    this.algo = algo;
    this.noneHash = noneHash(algo, env);
  }

  /** H([parent ?? NONE_HASH, tokens[start..end), extraKeys]). */
  hashBlock(
    parent: BlockHash | null,
    tokens: ArrayLike<number>,
    start = 0,
    end = tokens.length,
    extraKeys: readonly ExtraKey[] | null = null,
  ): BlockHash {
    return this.#digest(this.#writer.encode(parent ?? this.noneHash, tokens, start, end, extraKeys));
  }
}
