/**
 * Object keys of the obj tier: vLLM's key layout (./vllm-key-layout.ts) under the tier's
 * `prefix`, `<prefix>/<model>_<digest>_r<rank>/<hhh>/<hh>_g<group>/<hash_hex>.bin` for a
 * chunk and `<prefix>/<model>_<digest>/config.json` for the run configuration. Without a
 * prefix the keys start at `<model>_…` (no leading `/`).
 */
import { parseChunkKey } from './layout.ts';
import type { ObjectKeyOf, ObjManifest } from './obj-tier.ts';
import {
  blockSubPath,
  CONFIG_FILE_NAME,
  type RunLayout,
  rankDirName,
  runConfigFileText,
  runDirName,
} from './vllm-key-layout.ts';

export interface ObjKeys {
  objectKeyOf: ObjectKeyOf;
  manifest: ObjManifest;
}

export function objKeysOf(run: RunLayout, prefix: string): ObjKeys {
  const under = (path: string): string => (prefix ? `${prefix}/${path}` : path);
  const rankDir = rankDirName(run);
  return {
    objectKeyOf: (key: string): string => {
      const chunk = parseChunkKey(key);
      if (!chunk) throw new RangeError(`not an offload chunk key: ${key}`);
      return under(`${rankDir}/${blockSubPath(chunk.hashHex, chunk.group)}`);
    },
    manifest: {
      key: under(`${runDirName(run.fields)}/${CONFIG_FILE_NAME}`),
      body: runConfigFileText(run.fields),
    },
  };
}
