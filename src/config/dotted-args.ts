/**
 * vLLM's dotted CLI form for JSON-valued flags (docs/configuration.md#forms):
 * `--kv-transfer-config.kv_connector_extra_config.backend xgmi`, with a trailing `+`
 * turning a comma-separated value into a list. Values are JSON, else human-readable
 * integers (`80g`), else plain strings.
 */
import { getLogger } from '../logging/logger.ts';
import { configError } from './config-error.ts';
import { parseHumanReadableInt } from './human-readable.ts';

const log = getLogger('kvconnect.config.dotted-args');

export interface DottedArg {
  /** Path below the flag, e.g. `kv_connector_extra_config.backend` or `backends+`. */
  path: string;
  value: string;
}

/** One dotted value: JSON, else a human-readable integer, else the string itself. */
export function parseDottedValue(raw: string, field: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    const n = parseHumanReadableInt(raw, field);
    return n === undefined ? raw : n;
  }
}

/**
 * Splits `argv` into the dotted arguments of `flag` (e.g. `--kv-transfer-config`) and the
 * rest. Accepts `--flag.a.b value` and `--flag.a.b=value`; dashes or underscores in the flag.
 */
export function extractDottedArgs(
  argv: readonly string[],
  flag: string,
): { rest: string[]; dotted: DottedArg[] } {
  const names = [flag, flag.replaceAll('-', '_').replace(/^__/, '--')];
  const rest: string[] = [];
  const dotted: DottedArg[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const name = names.find((n) => arg.startsWith(`${n}.`));
    if (name === undefined) {
      rest.push(arg);
      continue;
    }
    const body = arg.slice(name.length + 1);
    const eq = body.indexOf('=');
    if (eq >= 0) {
      dotted.push({ path: body.slice(0, eq), value: body.slice(eq + 1) });
    } else {
      const value = argv[i + 1];
      if (value === undefined) {
        throw configError(
          `${flag.replace(/^--/, '')}.${body}`,
          'a value after the flag',
          undefined,
          `Write ${arg} VALUE.`,
        );
      }
      dotted.push({ path: body, value });
      i++;
    }
  }
  return { rest, dotted };
}

/** Builds the nested object the dotted arguments describe; later duplicates win, with vLLM's warning. */
export function dottedArgsToObject(
  args: readonly DottedArg[],
  root = 'kv_transfer_config',
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const seen = new Set<string>();
  const duplicates: string[] = [];
  for (const { path, value } of args) {
    const asList = path.endsWith('+');
    const keys = (asList ? path.slice(0, -1) : path).split('.');
    const field = `${root}.${keys.join('.')}`;
    if (keys.some((k) => k === '__proto__' || k === 'constructor' || k === 'prototype')) {
      throw configError(
        field,
        'a plain key',
        path,
        'Keys named __proto__, constructor or prototype are not allowed.',
      );
    }
    if (keys.some((k) => k === '')) {
      throw configError(
        field,
        'a dotted key path such as kv_connector_extra_config.backend',
        path,
        'Remove the empty segment.',
      );
    }
    if (seen.has(keys.join('.'))) duplicates.push(keys.join('.'));
    seen.add(keys.join('.'));
    const parsed = asList
      ? value.split(',').map((part, i) => parseDottedValue(part, `${field}[${i}]`))
      : parseDottedValue(value, field);
    let node = out;
    for (const [i, key] of keys.entries()) {
      if (i === keys.length - 1) {
        node[key] = parsed;
        break;
      }
      const next = node[key];
      if (next === undefined) {
        node[key] = {};
      } else if (typeof next !== 'object' || next === null || Array.isArray(next)) {
        throw configError(
          `${root}.${keys.slice(0, i + 1).join('.')}`,
          'an object (it has nested keys)',
          next,
          'Do not set both a key and one of its sub-keys.',
        );
      }
      node = node[key] as Record<string, unknown>;
    }
  }
  if (duplicates.length > 0) log.warn('Found duplicate keys %s', duplicates.join(', '));
  return out;
}

/** Deep-merges `overlay` into `base` (objects merge, everything else replaces). */
export function deepMerge(
  base: Record<string, unknown>,
  overlay: Record<string, unknown>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(overlay)) {
    const prev = out[key];
    const bothObjects =
      typeof prev === 'object' &&
      prev !== null &&
      !Array.isArray(prev) &&
      typeof value === 'object' &&
      value !== null &&
      !Array.isArray(value);
    out[key] = bothObjects
      ? deepMerge(prev as Record<string, unknown>, value as Record<string, unknown>)
      : value;
  }
  return out;
}
