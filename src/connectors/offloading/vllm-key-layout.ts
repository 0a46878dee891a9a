/**
 * Where offloaded chunks live in a shared store, named as vLLM names them
 * (docs/connectors/offloading.md#on-disk-and-object-key-layout):
 *
 *   <root>/<model>_<digest>/config.json
 *   <root>/<model>_<digest>_r<rank>/<hhh>/<hh>_g<group>/<hash_hex>.bin
 *
 * `<model>` is the model name with every `/` replaced by `_`; `<digest>` is the first 12 hex
 * digits of the SHA-256 of the run configuration serialised as Python's
 * `json.dumps(fields, sort_keys=True, separators=(",", ":"))` (ASCII only, keys sorted at
 * every level). Engines with the same run configuration therefore share one directory (or
 * one object-key prefix); any difference in the hashed fields gives a different one.
 * `config.json` holds the same fields, written as `json.dump(fields, indent=2, sort_keys=True)`.
 *
 * The fs tier joins these names under `root_dir`; the obj tier uses the same names as object
 * keys under its `prefix`.
 */
import { createHash } from 'node:crypto';
import type { EngineConfig } from '../../config/types.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';

/** Length of the run-configuration digest in the directory name. */
export const CONFIG_DIGEST_HEX_CHARS = 12;
export const CONFIG_FILE_NAME = 'config.json';
export const BLOCK_FILE_SUFFIX = '.bin';
/**
 * kvconnect's value of vLLM's `inference_engine` field: kvconnect's files carry an integrity
 * header and a layer-major chunk layout that vLLM's raw `.bin` files do not, so the two
 * engines must never read each other's files — a different engine name gives a different
 * digest, hence a different directory.
 */
export const INFERENCE_ENGINE_NAME = 'kvconnect';

export interface RunConfigGroup {
  tokens_per_block: number;
  layer_names: string[];
}

/** The hashed run configuration: vLLM's field names and order of precedence. */
export interface RunConfigFields {
  model_name: string;
  tokens_per_hash: number;
  blocks_per_file: number;
  tp_size: number;
  pp_size: number;
  pcp_size: number;
  dcp_size: number;
  dtype: string;
  kv_cache_groups: RunConfigGroup[];
  inference_engine: string;
  /** Present (false) only when the layout is not parallelism-agnostic. */
  parallel_agnostic?: false;
  /** Present (true) only for a replicated (single-copy) layout. */
  replicated_layout?: true;
  canonical_format?: string;
  storage_format?: string;
}

/** The run configuration and the rank it is written for. */
export interface RunLayout {
  fields: RunConfigFields;
  rank: number;
}

function sortKeysDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeysDeep);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = sortKeysDeep(v);
    }
    return out;
  }
  return value;
}

/** Python's `ensure_ascii`: every non-ASCII UTF-16 unit as a lowercase `\uXXXX` escape. */
function asciiOnly(json: string): string {
  return json.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * `json.dumps(fields, sort_keys=True, separators=(",", ":"))` for the JSON subset of a run
 * configuration (strings, integers, booleans, lists, objects): JSON.stringify escapes
 * quotes, backslashes and control characters exactly as Python does.
 */
export function canonicalRunConfigJson(fields: RunConfigFields): string {
  return asciiOnly(JSON.stringify(sortKeysDeep(fields)));
}

/** `config.json`'s text: `json.dump(fields, f, indent=2, sort_keys=True)`. */
export function runConfigFileText(fields: RunConfigFields): string {
  return asciiOnly(JSON.stringify(sortKeysDeep(fields), null, 2));
}

export function configDigest(fields: RunConfigFields): string {
  return createHash('sha256')
    .update(canonicalRunConfigJson(fields), 'utf8')
    .digest('hex')
    .slice(0, CONFIG_DIGEST_HEX_CHARS);
}

export function safeModelName(modelName: string): string {
  return modelName.replaceAll('/', '_');
}

/** `<model>_<digest>`: the name of the run's directory (or key segment) under the root. */
export function runDirName(fields: RunConfigFields): string {
  return `${safeModelName(fields.model_name)}_${configDigest(fields)}`;
}

/** `<root>/<model>_<digest>`, joined with `/` exactly as vLLM joins it. */
export function configDir(root: string, fields: RunConfigFields): string {
  return `${root}/${runDirName(fields)}`;
}

/** `<root>/<model>_<digest>/config.json`. */
export function configFilePath(root: string, fields: RunConfigFields): string {
  return `${configDir(root, fields)}/${CONFIG_FILE_NAME}`;
}

/** `<hhh>/<hh>_g<group>/<hash_hex>.bin`: a block's place under its rank directory. */
export function blockSubPath(hashHex: string, group: number): string {
  return `${hashHex.slice(0, 3)}/${hashHex.slice(3, 5)}_g${group}/${hashHex}${BLOCK_FILE_SUFFIX}`;
}

/** `<model>_<digest>_r<rank>`: the name of a rank's block directory under the root. */
export function rankDirName(layout: RunLayout): string {
  return `${runDirName(layout.fields)}_r${layout.rank}`;
}

/** `<root>/<model>_<digest>_r<rank>/<hhh>/<hh>_g<group>/<hash_hex>.bin`. */
export function blockKey(root: string, layout: RunLayout, hashHex: string, group: number): string {
  return `${root}/${rankDirName(layout)}/${blockSubPath(hashHex, group)}`;
}

/** The two directory levels of blockSubPath: `<hhh>`, then `<hh>_g<group>`. */
const PREFIX_DIR = '([0-9a-f]{3})';
const GROUP_DIR = '([0-9a-f]{2})_g(\\d+)';
const PREFIX_DIR_RE = new RegExp(`^${PREFIX_DIR}$`);
const GROUP_DIR_RE = new RegExp(`^${GROUP_DIR}$`);
const BLOCK_SUB_PATH_RE = new RegExp(`^${PREFIX_DIR}/${GROUP_DIR}/([0-9a-f]+)\\.bin$`);

/** True for a directory name blockSubPath gives at its first level (`<hhh>`). */
export function isBlockPrefixDir(name: string): boolean {
  return PREFIX_DIR_RE.test(name);
}

/** True for a directory name blockSubPath gives at its second level (`<hh>_g<group>`). */
export function isBlockGroupDir(name: string): boolean {
  return GROUP_DIR_RE.test(name);
}

/** The (group, hash) a block file name stands for, or null for any other name. */
export function parseBlockSubPath(subPath: string): { group: number; hashHex: string } | null {
  const m = BLOCK_SUB_PATH_RE.exec(subPath);
  if (!m) return null;
  const [, h3, h2, group, hashHex] = m as unknown as [string, string, string, string, string];
  if (!hashHex.startsWith(h3 + h2)) return null;
  return { group: Number(group), hashHex };
}

/**
 * kvconnect's run configuration, derived as vLLM derives it from its engine config:
 * `tokens_per_hash` is the prefix-cache block size, `tokens_per_block` each group's block
 * size (× decode-context parallelism, 1 here), `blocks_per_file` the offload chunk size in
 * blocks. Like vLLM's fs and obj tiers, a single full-attention group is
 * parallelism-agnostic: its sizes collapse to 1 and its rank to 0. `dtype` is the KV cache
 * element type (kvconnect resolves `auto` before this point). `storage_format` records
 * kvconnect's frame format and each group's page geometry, so engines whose chunk bytes
 * differ never share files even under one model name.
 */
export function runLayoutFor(
  engineConfig: EngineConfig,
  kvCacheConfig: KVCacheConfig,
  blocksPerChunk: number,
): RunLayout {
  const groups = kvCacheConfig.groups;
  const only = groups.length === 1 ? groups[0] : undefined;
  const agnostic = only !== undefined && only.spec.kind === 'full_attention';
  const fields: RunConfigFields = {
    model_name: engineConfig.model.model,
    tokens_per_hash: engineConfig.cache.blockSize,
    blocks_per_file: blocksPerChunk,
    tp_size: agnostic ? 1 : engineConfig.parallel.tensorParallelSize,
    pp_size: 1,
    pcp_size: 1,
    dcp_size: 1,
    dtype: engineConfig.cache.cacheDtype,
    kv_cache_groups: groups.map((g) => ({
      tokens_per_block: g.spec.blockSize,
      layer_names: [...g.layerNames],
    })),
    inference_engine: INFERENCE_ENGINE_NAME,
    storage_format: `kvo1:${groups.map((g) => `${g.spec.kind}/${g.spec.pageSizeBytes}`).join(',')}`,
  };
  if (!agnostic) fields.parallel_agnostic = false;
  // One engine process holds every tensor-parallel rank's KV; its tier writes as rank 0.
  return { fields, rank: 0 };
}
