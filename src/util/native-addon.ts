/**
 * Loads the optional native addon (native/*.c, built at install by scripts/build-native.mjs)
 * once per process. It holds every native piece of kvconnect: the mmap'ed shm ring and the
 * block checksum (used by src/transfer/) and the float32 matmul (used by the engine). Each
 * user checks for the export it needs and keeps a pure-JS or WebAssembly path for when the
 * addon is missing (not built, not Linux, or KVCONNECT_DISABLE_NATIVE=1).
 */
import { createRequire } from 'node:module';
import { type EnvName, readEnv } from './envs.ts';

export const DISABLE_NATIVE_ENV = 'KVCONNECT_DISABLE_NATIVE' satisfies EnvName;

/** Relative to this file in src/util/ and in dist/util/ alike. */
const ADDON_PATH = '../../native/build/Release/kvshm.node';

function load(): { addon: Record<string, unknown> | null; reason: string } {
  if (readEnv(DISABLE_NATIVE_ENV)) return { addon: null, reason: `${DISABLE_NATIVE_ENV}=1` };
  if (process.platform !== 'linux') return { addon: null, reason: `not Linux (${process.platform})` };
  try {
    return { addon: createRequire(import.meta.url)(ADDON_PATH) as Record<string, unknown>, reason: 'loaded' };
  } catch (e) {
    const msg = e instanceof Error ? e.message.split('\n')[0] : String(e);
    return { addon: null, reason: `not built (${msg}); run \`node scripts/build-native.mjs\`` };
  }
}

const loaded = load();

/** The addon's exports, or null; with the reason (for diagnostics). */
export const nativeAddon: Record<string, unknown> | null = loaded.addon;
export const nativeAddonReason: string = loaded.reason;

/**
 * The addon's exports `names` as one binding when every one of them is a function (an addon
 * built from older sources may lack some), else null.
 */
export function nativeFunctions<T>(...names: (keyof T & string)[]): T | null {
  const mod = nativeAddon;
  if (mod === null || !names.every((n) => typeof mod[n] === 'function')) return null;
  return mod as T;
}
