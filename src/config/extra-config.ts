/**
 * One reader for `kv_connector_extra_config`. Each connector declares its keys as a schema
 * (data); values are read by one set of rules, errors name the key, and keys the schema does
 * not know are warned about once (so `kvconnect check-config` lists them). The rules are in
 * docs/configuration.md ("kv_connector_extra_config values").
 */
import type { ErrorCode } from '../errors/codes.ts';
import { pythonRepr } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import { CONFIG_INVALID, configError, didYouMean } from './config-error.ts';

const log = getLogger('kvconnect.config.extra-config');

export const EXTRA_CONFIG_FIELD = 'kv_connector_extra_config';

/** `hint` replaces the generic "how to fix" of a field's error. */
export type ExtraField =
  | { type: 'boolean'; default: boolean; hint?: string }
  | {
      type: 'integer' | 'number';
      hint?: string;
      default?: number;
      min?: number;
      max?: number;
      /** min is exclusive (`> min`). */
      aboveMin?: boolean;
      /** 0, '' and null also mean "use the default" (vLLM fills some ports in when falsy). */
      falsyIsDefault?: boolean;
    }
  | { type: 'string'; default?: string; oneOf?: readonly string[]; nonEmpty?: boolean; hint?: string }
  /** Read by the connector itself (lists, objects, values with vLLM-specific messages). */
  | { type: 'custom' }
  /** A vLLM key kvconnect accepts but does not use; `why` is shown by the warning. */
  | { type: 'ignored'; why: string };

export interface ExtraConfigSchema {
  connector: string;
  /** Code of the errors; KV_CONFIG_INVALID unless the connector has its own. */
  code?: ErrorCode;
  fields: Readonly<Record<string, ExtraField>>;
}

type ValueOf<F extends ExtraField> = F extends { type: 'boolean' }
  ? boolean
  : F extends { type: 'integer' | 'number'; default: number }
    ? number
    : F extends { type: 'integer' | 'number' }
      ? number | undefined
      : F extends { type: 'string'; default: string }
        ? string
        : F extends { type: 'string' }
          ? string | undefined
          : unknown;

/** The values of a schema's fields: defaults applied, `custom` keys passed through raw. */
export type ExtraValues<S extends ExtraConfigSchema> = {
  -readonly [K in keyof S['fields']]: ValueOf<S['fields'][K]>;
};

const TRUE_WORDS = new Set(['true', '1']);
const FALSE_WORDS = new Set(['false', '0']);

function isUnset(v: unknown): boolean {
  return v === undefined || v === null;
}

/** Booleans: JSON true/false, 1/0, or the strings "true"/"false"/"1"/"0" in any case, spaces trimmed. */
export function parseExtraBoolean(v: unknown): boolean | null {
  if (typeof v === 'boolean') return v;
  if (v === 1 || v === 0) return v === 1;
  if (typeof v !== 'string') return null;
  const word = v.trim().toLowerCase();
  return TRUE_WORDS.has(word) ? true : FALSE_WORDS.has(word) ? false : null;
}

/** Numbers: JSON numbers or numeric strings (spaces trimmed, `_` between digits as in Python). */
export function parseExtraNumber(v: unknown): number | null {
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v !== 'string') return null;
  const s = v.trim();
  if (!/^[+-]?(\d(_?\d)*)?(\.\d(_?\d)*)?([eE][+-]?\d+)?$/.test(s) || !/\d/.test(s)) return null;
  const n = Number(s.replaceAll('_', ''));
  return Number.isFinite(n) ? n : null;
}

function numberExpectation(f: Extract<ExtraField, { type: 'integer' | 'number' }>): string {
  const what = f.type === 'integer' ? 'an integer' : 'a number';
  const bounds = [
    f.min === undefined ? '' : `${f.aboveMin ? '>' : '>='} ${f.min}`,
    f.max === undefined ? '' : `<= ${f.max}`,
  ].filter(Boolean);
  return bounds.length > 0 ? `${what} ${bounds.join(' and ')}` : what;
}

function example(f: ExtraField): string {
  if ('default' in f && f.default !== undefined) return JSON.stringify(f.default);
  if (f.type === 'string' && f.oneOf) return JSON.stringify(f.oneOf[0]);
  if (f.type === 'integer' || f.type === 'number') return String(f.min === undefined ? 1 : f.min + 1);
  return '...';
}

function readField(schema: ExtraConfigSchema, key: string, f: ExtraField, raw: unknown): unknown {
  const fail = (expected: string): never => {
    throw configError(
      `${EXTRA_CONFIG_FIELD}.${key}`,
      expected,
      raw,
      ('hint' in f ? f.hint : undefined) ??
        `Set "${key}": ${example(f)} in ${EXTRA_CONFIG_FIELD} of ${schema.connector}, or remove it for the default.`,
      schema.code ?? CONFIG_INVALID,
    );
  };
  switch (f.type) {
    case 'custom':
    case 'ignored':
      return raw;
    case 'boolean': {
      if (isUnset(raw)) return f.default;
      return parseExtraBoolean(raw) ?? fail('true or false');
    }
    case 'integer':
    case 'number': {
      if (isUnset(raw) || (f.falsyIsDefault && (raw === 0 || raw === ''))) return f.default;
      const n = parseExtraNumber(raw);
      const ok =
        n !== null &&
        (f.type === 'number' || Number.isInteger(n)) &&
        (f.min === undefined || (f.aboveMin ? n > f.min : n >= f.min)) &&
        (f.max === undefined || n <= f.max);
      return ok ? n : fail(numberExpectation(f));
    }
    case 'string': {
      if (isUnset(raw)) return f.default;
      const expected = f.oneOf ? f.oneOf.map((o) => `'${o}'`).join(' or ') : 'a string';
      if (typeof raw !== 'string' || (f.nonEmpty && raw === ''))
        fail(f.nonEmpty ? 'a non-empty string' : expected);
      if (f.oneOf && !f.oneOf.includes(raw as string)) fail(expected);
      return raw;
    }
  }
}

/** Keys of `extra` the schema does not declare. */
export function unknownExtraKeys(schema: ExtraConfigSchema, extra: Record<string, unknown>): string[] {
  return Object.keys(extra).filter((k) => !Object.hasOwn(schema.fields, k));
}

/** The warnings the extra config deserves: unknown keys (with the closest known one) and ignored vLLM keys. */
export function extraConfigWarnings(schema: ExtraConfigSchema, extra: Record<string, unknown>): string[] {
  const known = Object.keys(schema.fields);
  const unknown = unknownExtraKeys(schema, extra).map((key) => {
    const close = didYouMean(key, known);
    return `Unknown key ${pythonRepr(key)} in kv_connector_extra_config of ${schema.connector} is ignored${close ? ` (${close})` : ''}. Known keys: ${known.join(', ')}.`;
  });
  const ignored = Object.entries(schema.fields).flatMap(([key, f]) =>
    f.type === 'ignored' && !isUnset(extra[key])
      ? [`${schema.connector} ignores kv_connector_extra_config.${key}: ${f.why}`]
      : [],
  );
  return [...unknown, ...ignored];
}

/** Reads every declared key (throwing on a bad value); logs each warning of extraConfigWarnings once. */
export function readExtraConfig<S extends ExtraConfigSchema>(
  schema: S,
  extra: Record<string, unknown>,
): ExtraValues<S> {
  for (const warning of extraConfigWarnings(schema, extra)) log.warnOnce('%s', warning);
  const values: Record<string, unknown> = {};
  for (const [key, f] of Object.entries(schema.fields)) values[key] = readField(schema, key, f, extra[key]);
  return values as ExtraValues<S>;
}
