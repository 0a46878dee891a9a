/**
 * vLLM's human-readable numbers: `k/m/g/t` are decimal multipliers, `K/M/G/T` binary ones,
 * and a decimal number cannot take a binary suffix (`8G` → 8589934592, `1.5k` → 1500).
 */
import { KVError } from '../errors/kv-error.ts';
import { CONFIG_INVALID } from './config-error.ts';

const DECIMAL: Record<string, number> = { k: 1e3, m: 1e6, g: 1e9, t: 1e12 };
const BINARY: Record<string, number> = { K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 };
const TOKEN = /^(-?\d+(?:\.\d+)?)([kmgtKMGT])$/;

/** The integer a human-readable token stands for, or undefined if it is not one. Throws on `1.5G`. */
export function parseHumanReadableInt(token: string, field = '(value)'): number | undefined {
  const t = token.trim();
  if (/^-?\d+$/.test(t)) return Number(t);
  const m = TOKEN.exec(t);
  if (!m) return undefined;
  const [, num, suffix] = m as unknown as [string, string, string];
  const binary = BINARY[suffix];
  if (binary !== undefined) {
    if (num.includes('.')) {
      throw new KVError(
        CONFIG_INVALID,
        `Decimals are not allowed with binary suffixes like ${suffix}: ${t}`,
        {
          field,
          hint: `Write an integer before '${suffix}' (e.g. 1536M instead of 1.5G), or use the decimal suffix '${suffix.toLowerCase()}'.`,
        },
      );
    }
    return Number(num) * binary;
  }
  return Math.trunc(Number(num) * (DECIMAL[suffix] ?? 1));
}

/** Rewrites bare (unquoted) human-readable tokens in JSON text into plain integers. */
export function expandJsonHumanReadableNumbers(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const ch = text[i]!;
    if (ch === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (/[-0-9]/.test(ch)) {
      let j = i + 1;
      while (j < text.length && /[0-9.a-zA-Z+-]/.test(text[j]!)) j++;
      const token = text.slice(i, j);
      const value = TOKEN.test(token) ? parseHumanReadableInt(token) : undefined;
      out += value === undefined ? token : String(value);
      i = j;
      continue;
    }
    out += ch;
    i++;
  }
  return out;
}
