/**
 * Typed readers for request-body fields. Each failure is a 400 naming the field (as
 * OpenAI's `param`), what was expected and what was received.
 */
import { type ErrorCode, KVError } from '../errors/index.ts';

export type Body = Record<string, unknown>;

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string')
    return JSON.stringify(value.length > 40 ? `${value.slice(0, 37)}...` : value);
  if (typeof value === 'object') return 'an object';
  return String(value);
}

export function invalid(field: string, expected: string, received: unknown, hint?: string): KVError {
  return badRequest(
    `Invalid value for '${field}': expected ${expected}, received ${describe(received)}.`,
    field,
    hint ?? `Fix '${field}' in the request body (see the OpenAI API reference).`,
  );
}

/** A 400 naming the offending field as OpenAI's `param`. */
export function badRequest(
  message: string,
  param: string,
  hint: string,
  code: ErrorCode = 'SERVER_INVALID_REQUEST',
): KVError {
  return new KVError(code, message, { field: param, hint });
}

export function asBody(value: unknown): Body {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw badRequest(
      'The request body must be a JSON object.',
      'body',
      'Send a JSON object such as {"model": "...", "prompt": "..."}.',
    );
  }
  return value as Body;
}

export interface NumberRange {
  min?: number;
  max?: number;
  /** Exclusive lower bound. */
  above?: number;
  integer?: boolean;
}

function rangeText(r: NumberRange): string {
  const kind = r.integer ? 'an integer' : 'a number';
  const parts: string[] = [];
  if (r.above !== undefined) parts.push(`> ${r.above}`);
  if (r.min !== undefined) parts.push(`>= ${r.min}`);
  if (r.max !== undefined) parts.push(`<= ${r.max}`);
  return parts.length ? `${kind} ${parts.join(' and ')}` : kind;
}

/** pydantic's lax mode: a numeric string is read as its number (`"0.5"`, `" 12 "`). */
function laxNumber(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  const t = v.trim();
  return /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t) ? Number(t) : v;
}

const LAX_TRUE = new Set(['1', 'on', 't', 'true', 'y', 'yes']);
const LAX_FALSE = new Set(['0', 'off', 'f', 'false', 'n', 'no']);

/**
 * pydantic's boolean words in any case ("true"/"false", "1"/"0", "yes"/"no", "on"/"off",
 * "t"/"f", "y"/"n"), else undefined.
 */
export function boolWord(text: string): boolean | undefined {
  const t = text.toLowerCase();
  return LAX_TRUE.has(t) ? true : LAX_FALSE.has(t) ? false : undefined;
}

/** pydantic's lax booleans: a boolean word (boolWord, surrounding spaces ignored), and 0/1. */
function laxBool(v: unknown): unknown {
  if (v === 0 || v === 1) return v === 1;
  if (typeof v !== 'string') return v;
  return boolWord(v.trim()) ?? v;
}

export function optNumber(body: Body, key: string, range: NumberRange = {}): number | undefined {
  const v = laxNumber(body[key]);
  if (v === undefined || v === null) return undefined;
  const ok =
    typeof v === 'number' &&
    Number.isFinite(v) &&
    (!range.integer || Number.isInteger(v)) &&
    (range.min === undefined || v >= range.min) &&
    (range.max === undefined || v <= range.max) &&
    (range.above === undefined || v > range.above);
  if (!ok) throw invalid(key, rangeText(range), v);
  return v as number;
}

export function optBool(body: Body, key: string): boolean | undefined {
  const v = laxBool(body[key]);
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(key, 'a boolean', v);
  return v;
}

export function optString(body: Body, key: string): string | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalid(key, 'a string', v);
  return v;
}

export function optObject(body: Body, key: string): Body | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw invalid(key, 'an object', v);
  return v as Body;
}

/** `stop`: a string or a list of up to 4+ strings (vLLM allows any count). */
export function optStop(body: Body): string[] {
  const v = body['stop'];
  if (v === undefined || v === null) return [];
  if (typeof v === 'string') return v === '' ? [] : [v];
  if (Array.isArray(v) && v.every((s) => typeof s === 'string'))
    return (v as string[]).filter((s) => s !== '');
  throw invalid('stop', 'a string or an array of strings', v);
}

/** A list of strings (e.g. bad_words); absent = []. */
export function optStringList(body: Body, key: string): string[] {
  const v = body[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string'))
    throw invalid(key, 'an array of strings', v);
  return v as string[];
}

export function optTokenIds(body: Body, key: string, vocabSize: number): number[] {
  const v = body[key];
  if (v === undefined || v === null) return [];
  if (!isTokenIdArray(v, vocabSize))
    throw invalid(key, `an array of integer token ids in [0, ${vocabSize})`, v);
  return v;
}

export function isTokenIdArray(v: unknown, vocabSize: number): v is number[] {
  return (
    Array.isArray(v) &&
    v.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0 && t < vocabSize)
  );
}
