/**
 * `kvconnect serve --config FILE.yaml`: llm-d-inference-sim's YAML configuration, keys with
 * the sim's names and meanings, so its published latency profiles load unchanged. Command-line
 * flags win over the file, as in the sim. A sim key kvconnect does not implement is an error
 * naming it; the few the sim itself ignores (and that cannot change what kvconnect serves) are
 * logged and skipped.
 */
import { readFileSync } from 'node:fs';
import { parse, YAMLParseError } from 'yaml';
import { KVError } from '../errors/kv-error.ts';
import { getLogger } from '../logging/logger.ts';
import { configError, didYouMean } from './config-error.ts';
import { EMULATION_OPTION_NAMES } from './emulation-config.ts';
import { STEERING_OPTION_NAMES } from './steering-options.ts';

const log = getLogger('kvconnect.config.sim-config-file');

/** Sim key → kvconnect engine option (snake_case, see engine-options.ts). */
const ENGINE_KEYS: Record<string, string> = {
  'max-num-seqs': 'max_num_seqs',
  'max-model-len': 'max_model_len',
  seed: 'seed',
  'block-size': 'block_size',
  'enable-prefix-caching': 'enable_prefix_caching',
  'data-parallel-rank': 'data_parallel_rank',
  'data-parallel-size': 'data_parallel_size',
  'max-loras': 'max_loras',
  'max-cpu-loras': 'max_cpu_loras',
};

/** Keys the sim accepts and ignores; ignoring them here changes nothing either. */
const IGNORED_KEYS: Record<string, string> = {
  'enforce-eager': 'llm-d-inference-sim ignores it; kvconnect has no CUDA graphs',
  'mm-processor-kwargs': 'llm-d-inference-sim ignores it; kvconnect serves no multimodal input',
  'ec-transfer-config': 'llm-d-inference-sim ignores it; kvconnect has no encoder cache',
  'tensor-parallel-size':
    'llm-d-inference-sim ignores it; for the roofline target use --target-tp, for real tensor parallelism pass --tensor-parallel-size',
  'enable-request-id-headers': 'kvconnect always returns X-Request-Id',
};

export interface SimConfigFile {
  path: string;
  /** Engine options (snake_case). */
  engine: Record<string, unknown>;
  /** Emulation options (the sim's kebab-case names). */
  emulation: Record<string, unknown>;
  /** Failure injection, fake metrics, startup duration (the sim's names, steering-options.ts). */
  steering: Record<string, unknown>;
  /** The sim's `model` (see mergeSimConfig), `served-model-name`, `port`, `max-waiting-queue-length`. */
  model: string | undefined;
  servedModelName: string | undefined;
  port: number | undefined;
  maxQueue: number | undefined;
  /** The sim's `lora-modules` (JSON strings or objects), as --lora-modules values; they turn LoRA on. */
  loraModules: string[] | undefined;
}

export function loadSimConfigFile(path: string): SimConfigFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw configError('config', 'a readable YAML file', path, `Check the path: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    const where = e instanceof YAMLParseError && e.linePos ? ` (line ${e.linePos[0].line})` : '';
    throw configError('config', 'valid YAML', path, `Fix the YAML${where}: ${(e as Error).message}`);
  }
  if (doc === null || doc === undefined) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw configError(
      'config',
      'a YAML mapping of llm-d-inference-sim options',
      doc,
      `Write ${path} as "key: value" lines.`,
    );
  }
  return readSimKeys(doc as Record<string, unknown>, path);
}

/** Sorts the file's keys into engine, emulation and server options; refuses what is not implemented. */
export function readSimKeys(doc: Record<string, unknown>, path: string): SimConfigFile {
  const out: SimConfigFile = {
    path,
    engine: {},
    emulation: {},
    steering: {},
    model: undefined,
    servedModelName: undefined,
    port: undefined,
    maxQueue: undefined,
    loraModules: undefined,
  };
  const known = [
    ...Object.keys(ENGINE_KEYS),
    ...Object.keys(IGNORED_KEYS),
    ...EMULATION_OPTION_NAMES,
    ...STEERING_OPTION_NAMES,
  ];
  for (const [key, value] of Object.entries(doc)) {
    if (value === null || value === undefined) continue;
    const engineKey = ENGINE_KEYS[key];
    if (engineKey) out.engine[engineKey] = value;
    else if (EMULATION_OPTION_NAMES.includes(key)) out.emulation[key] = value;
    else if (STEERING_OPTION_NAMES.includes(key)) out.steering[key] = value;
    else if (IGNORED_KEYS[key]) log.info(`${path}: ignoring ${key} (${IGNORED_KEYS[key]})`);
    else if (key === 'model') out.model = stringKey(key, value, path);
    else if (key === 'served-model-name') out.servedModelName = servedName(value, path);
    else if (key === 'port') out.port = intKey(key, value, path, 0, 65535);
    else if (key === 'max-waiting-queue-length') out.maxQueue = intKey(key, value, path, 0, 1_000_000);
    else if (key === 'lora-modules') out.loraModules = loraModules(value, path);
    else {
      const suggestion = didYouMean(key, [
        ...known,
        'model',
        'served-model-name',
        'port',
        'max-waiting-queue-length',
        'lora-modules',
      ]);
      throw unimplemented(
        key,
        path,
        suggestion ? `${suggestion[0]?.toUpperCase()}${suggestion.slice(1)}` : '',
      );
    }
  }
  return out;
}

/**
 * Applies the file under the command line (flags win). In `random` / `echo` mode the sim's
 * `model` is the name served (kvconnect runs no weights for it); in `model` mode it is the
 * model kvconnect loads.
 */
export function mergeSimConfig(
  file: SimConfigFile | null,
  cli: {
    engine: Record<string, unknown>;
    emulation: Record<string, unknown>;
    steering?: Record<string, unknown>;
  },
): {
  engine: Record<string, unknown>;
  emulation: Record<string, unknown>;
  steering: Record<string, unknown>;
} {
  if (!file) return { ...cli, steering: cli.steering ?? {} };
  const engine = { ...file.engine, ...cli.engine };
  const emulation = { ...file.emulation, ...cli.emulation };
  const steering = { ...file.steering, ...(cli.steering ?? {}) };
  const mode = emulation.mode ?? 'model';
  if (file.loraModules !== undefined && file.loraModules.length > 0 && engine.enable_lora === undefined) {
    engine.enable_lora = true;
  }
  if (file.servedModelName !== undefined && engine.served_model_name === undefined) {
    engine.served_model_name = file.servedModelName;
  }
  if (file.model !== undefined) {
    if (mode === 'model') {
      if (engine.model === undefined) engine.model = file.model;
    } else if (engine.served_model_name === undefined) {
      engine.served_model_name = file.model;
    }
  }
  return { engine, emulation, steering };
}

function unimplemented(key: string, path: string, hint: string): KVError {
  return new KVError(
    'KV_CONFIG_UNKNOWN_KEY',
    `llm-d-inference-sim option '${key}' in ${path} is not implemented by kvconnect`,
    {
      field: key,
      hint: `${hint ? `${hint} ` : ''}Remove it from the file; docs/emulation.md lists the sim options kvconnect reads.`,
    },
  );
}

function stringKey(key: string, value: unknown, path: string): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw configError(key, 'a non-empty string', value, `Fix ${key} in ${path}.`);
  }
  return value.trim();
}

function intKey(key: string, value: unknown, path: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw configError(key, `an integer in ${min}..${max}`, value, `Fix ${key} in ${path}.`);
  }
  return value;
}

/** The sim takes a list of names; kvconnect serves one. */
function servedName(value: unknown, path: string): string {
  const names = Array.isArray(value) ? value : [value];
  if (names.length !== 1) {
    throw configError(
      'served-model-name',
      'exactly one name (kvconnect serves one model name)',
      value,
      `Keep one name under served-model-name in ${path}.`,
    );
  }
  return stringKey('served-model-name', names[0], path);
}

/** `lora-modules`: a list of the sim's JSON strings (or mappings) → --lora-modules values. */
function loraModules(value: unknown, path: string): string[] {
  if (!Array.isArray(value)) {
    throw configError(
      'lora-modules',
      'a list of adapters',
      value,
      `Write lora-modules in ${path} as a list of '{"name": ..., "path": ...}' entries.`,
    );
  }
  return value.map((m) => (typeof m === 'string' ? m : JSON.stringify(m)));
}
