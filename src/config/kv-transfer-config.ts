/**
 * vLLM's KVTransferConfig (docs/configuration.md#kv_transfer_config): the same snake_case
 * fields, defaults and validation. Unknown top-level keys are rejected; connector-specific
 * knobs live in `kv_connector_extra_config` and are validated by the connector class.
 */
import { randomUUID } from 'node:crypto';
import { KVError } from '../errors/kv-error.ts';
import { CONFIG_INVALID, configError, describeValue, didYouMean } from './config-error.ts';
import { type DottedArg, deepMerge, dottedArgsToObject, extractDottedArgs } from './dotted-args.ts';
import { expandJsonHumanReadableNumbers } from './human-readable.ts';
import type { KVLoadFailurePolicy, KVRole, KVTransferConfigFields, KVTransferConfigLike } from './types.ts';

export const KV_ROLES: readonly KVRole[] = ['kv_producer', 'kv_both', 'kv_consumer'];
const KV_ROLES_PY = "('kv_producer', 'kv_both', 'kv_consumer')";
export const KV_LOAD_FAILURE_POLICIES: readonly KVLoadFailurePolicy[] = ['recompute', 'fail'];

type FieldParser = (value: unknown, field: string) => unknown;

const str: FieldParser = (v, f) => {
  if (typeof v === 'string') return v;
  throw configError(f, 'a string', v, `Set ${f} to a JSON string.`);
};
const nullable =
  (inner: FieldParser): FieldParser =>
  (v, f) =>
    v === null ? null : inner(v, f);
const int: FieldParser = (v, f) => {
  if (typeof v === 'number' && Number.isSafeInteger(v)) return v;
  throw configError(f, 'an integer', v, `Set ${f} to a whole number, e.g. ${f === 'kv_port' ? 14579 : 1}.`);
};
const num: FieldParser = (v, f) => {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  throw configError(f, 'a number', v, `Set ${f} to a number of bytes, e.g. 1e9 or 1G.`);
};
const bool: FieldParser = (v, f) => {
  if (typeof v === 'boolean') return v;
  throw configError(f, 'true or false', v, `Set ${f} to the JSON literal true or false (without quotes).`);
};
const plainObject: FieldParser = (v, f) => {
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) return { ...(v as Record<string, unknown>) };
  throw configError(
    f,
    'a JSON object',
    v,
    `Put connector options in an object, e.g. "${f}": {"backend": "rdma"}.`,
  );
};
const role: FieldParser = (v, f) => {
  if (v === null) return null;
  if (typeof v === 'string' && (KV_ROLES as readonly string[]).includes(v)) return v;
  throw new KVError(
    'KV_ROLE_UNSUPPORTED',
    `Unsupported kv_role: ${String(v)}. Supported roles are ${KV_ROLES_PY}`,
    {
      field: f,
      hint: `Use "kv_producer" on the prefill instance, "kv_consumer" on the decode instance, or "kv_both" for offloading and sharing connectors.`,
      details: { expected: KV_ROLES, received: describeValue(v) },
    },
  );
};
const policy: FieldParser = (v, f) => {
  if (typeof v === 'string' && (KV_LOAD_FAILURE_POLICIES as readonly string[]).includes(v)) return v;
  throw configError(
    f,
    `one of ${KV_LOAD_FAILURE_POLICIES.map((p) => `"${p}"`).join(', ')}`,
    v,
    '"fail" aborts requests whose KV could not be loaded; "recompute" recomputes the missing blocks locally.',
  );
};

const FIELDS: { [K in keyof KVTransferConfigFields]: { parse: FieldParser; default: () => unknown } } = {
  kv_connector: { parse: nullable(str), default: () => null },
  engine_id: { parse: nullable(str), default: () => null },
  kv_buffer_device: { parse: str, default: () => 'cpu' },
  kv_buffer_size: { parse: num, default: () => 1e9 },
  kv_role: { parse: role, default: () => null },
  kv_rank: { parse: nullable(int), default: () => null },
  kv_parallel_size: { parse: int, default: () => 1 },
  kv_ip: { parse: str, default: () => '127.0.0.1' },
  kv_port: { parse: int, default: () => 14579 },
  kv_connector_extra_config: { parse: plainObject, default: () => ({}) },
  kv_connector_module_path: { parse: nullable(str), default: () => null },
  enable_permute_local_kv: { parse: bool, default: () => false },
  kv_load_failure_policy: { parse: policy, default: () => 'fail' },
};

/** Every field name, in vLLM's declaration order. */
export const KV_TRANSFER_CONFIG_FIELDS = Object.keys(FIELDS) as (keyof KVTransferConfigFields)[];

export class KVTransferConfig implements KVTransferConfigLike {
  readonly kv_connector: string | null;
  readonly engine_id: string;
  readonly kv_buffer_device: string;
  readonly kv_buffer_size: number;
  readonly kv_role: KVRole | null;
  readonly kv_rank: number | null;
  readonly kv_parallel_size: number;
  readonly kv_ip: string;
  readonly kv_port: number;
  readonly kv_connector_extra_config: Record<string, unknown>;
  readonly kv_connector_module_path: string | null;
  readonly enable_permute_local_kv: boolean;
  readonly kv_load_failure_policy: KVLoadFailurePolicy;

  /**
   * Validates `fields` (vLLM's rules, docs/configuration.md#kv_transfer_config). Prefer the
   * static parsers for untrusted input.
   */
  constructor(fields: Partial<KVTransferConfigFields> = {}) {
    const v = validateFields(fields as Record<string, unknown>);
    this.kv_connector = v.kv_connector as string | null;
    this.engine_id = (v.engine_id as string | null) ?? randomUUID();
    this.kv_buffer_device = v.kv_buffer_device as string;
    this.kv_buffer_size = v.kv_buffer_size as number;
    this.kv_role = v.kv_role as KVRole | null;
    this.kv_rank = v.kv_rank as number | null;
    this.kv_parallel_size = v.kv_parallel_size as number;
    this.kv_ip = v.kv_ip as string;
    this.kv_port = v.kv_port as number;
    this.kv_connector_extra_config = v.kv_connector_extra_config as Record<string, unknown>;
    this.kv_connector_module_path = v.kv_connector_module_path as string | null;
    this.enable_permute_local_kv = v.enable_permute_local_kv as boolean;
    this.kv_load_failure_policy = v.kv_load_failure_policy as KVLoadFailurePolicy;
  }

  static fromObject(input: unknown, fieldPrefix = ''): KVTransferConfig {
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      throw configError(
        fieldPrefix || 'kv_transfer_config',
        'a JSON object',
        input,
        `Pass an object such as {"kv_connector":"NixlConnector","kv_role":"kv_producer"}.`,
      );
    }
    try {
      return new KVTransferConfig(input as Partial<KVTransferConfigFields>);
    } catch (e) {
      throw fieldPrefix ? prefixField(e, fieldPrefix) : e;
    }
  }

  /** Parses `--kv-transfer-config '<json>'`, expanding bare human-readable numbers (`8G`). */
  static fromJSON(text: string): KVTransferConfig {
    return KVTransferConfig.fromObject(parseConfigJson(text, 'kv_transfer_config'));
  }

  /**
   * The CLI forms together: `--kv-transfer-config '<json>'` and/or dotted arguments
   * (merged over the JSON). Returns null when neither is given.
   */
  static fromCli(
    json: string | null | undefined,
    dotted: readonly DottedArg[] = [],
  ): KVTransferConfig | null {
    if ((json === undefined || json === null) && dotted.length === 0) return null;
    const base = json === undefined || json === null ? {} : parseConfigJson(json, 'kv_transfer_config');
    if (dotted.length === 0) return KVTransferConfig.fromObject(base);
    if (typeof base !== 'object' || base === null || Array.isArray(base))
      return KVTransferConfig.fromObject(base);
    return KVTransferConfig.fromObject(
      deepMerge(base as Record<string, unknown>, dottedArgsToObject(dotted)),
    );
  }

  /** Parses dotted argv (`--kv-transfer-config.kv_role kv_producer ...`); other arguments are ignored. */
  static fromDottedArgv(argv: readonly string[]): KVTransferConfig | null {
    return KVTransferConfig.fromCli(undefined, extractDottedArgs(argv, '--kv-transfer-config').dotted);
  }

  get isKvTransferInstance(): boolean {
    return this.kv_connector !== null && this.kv_role !== null;
  }

  get isKvProducer(): boolean {
    return this.kv_connector !== null && (this.kv_role === 'kv_producer' || this.kv_role === 'kv_both');
  }

  get isKvConsumer(): boolean {
    return this.kv_connector !== null && (this.kv_role === 'kv_consumer' || this.kv_role === 'kv_both');
  }

  getFromExtraConfig<T>(key: string, defaultValue: T): T | unknown {
    return Object.hasOwn(this.kv_connector_extra_config, key)
      ? this.kv_connector_extra_config[key]
      : defaultValue;
  }

  /** The wire form (snake_case), e.g. for logs, reports and child processes. */
  toJSON(): KVTransferConfigFields {
    const out = {} as Record<string, unknown>;
    for (const key of KV_TRANSFER_CONFIG_FIELDS) out[key] = this[key];
    return out as unknown as KVTransferConfigFields;
  }
}

function validateFields(input: Record<string, unknown>): Record<keyof KVTransferConfigFields, unknown> {
  for (const key of Object.keys(input)) {
    if (!Object.hasOwn(FIELDS, key)) {
      const suggestion = didYouMean(key, KV_TRANSFER_CONFIG_FIELDS);
      throw new KVError('KV_CONFIG_UNKNOWN_KEY', `Unknown field '${key}' in kv_transfer_config`, {
        field: key,
        hint: `${suggestion ? `${suggestion} ` : ''}Connector-specific options belong in kv_connector_extra_config; the top-level fields are: ${KV_TRANSFER_CONFIG_FIELDS.join(', ')}.`,
        details: { expected: KV_TRANSFER_CONFIG_FIELDS, received: key },
      });
    }
  }
  const out = {} as Record<keyof KVTransferConfigFields, unknown>;
  for (const key of KV_TRANSFER_CONFIG_FIELDS) {
    const raw = input[key];
    out[key] = raw === undefined ? FIELDS[key].default() : FIELDS[key].parse(raw, key);
  }
  if (out.kv_connector !== null && out.kv_role === null) {
    throw new KVError(
      'KV_ROLE_REQUIRED',
      `Please specify kv_role when kv_connector is set, supported roles are ${KV_ROLES_PY}`,
      {
        field: 'kv_role',
        hint: `Add "kv_role": "kv_producer" (prefill), "kv_consumer" (decode) or "kv_both" (offloading/sharing) next to "kv_connector".`,
        details: { expected: KV_ROLES, received: 'nothing' },
      },
    );
  }
  return out;
}

/** JSON.parse with human-readable numbers and a KVError that points at the problem. */
export function parseConfigJson(text: string, field: string): unknown {
  if (typeof text !== 'string')
    throw configError(field, 'a JSON string', text, 'Pass the config as JSON text.');
  const expanded = expandJsonHumanReadableNumbers(text);
  try {
    return JSON.parse(expanded);
  } catch (e) {
    throw new KVError('KV_CONFIG_INVALID_JSON', `Invalid JSON for ${field}: ${(e as Error).message}`, {
      field,
      cause: e,
      hint: `Quote the whole value for the shell and use double quotes inside, e.g. --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'.`,
      details: { received: describeValue(text) },
    });
  }
}

function prefixField(e: unknown, prefix: string): unknown {
  if (!(e instanceof KVError)) return e;
  const field = e.field ? `${prefix}.${e.field}` : prefix;
  return new KVError(e.code, e.message, {
    field,
    ...(e.hint === undefined ? {} : { hint: e.hint }),
    ...(e.details === undefined ? {} : { details: e.details }),
    cause: e.cause,
  });
}

export { CONFIG_INVALID };
