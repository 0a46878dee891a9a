/**
 * `--lora-modules` values as vLLM parses them: `name=path`, or a JSON object
 * `{"name": ..., "path": ..., "base_model_name": ...}` (base_model_name optional).
 */
import { KVError } from '../errors/index.ts';

export interface LoRAModulePath {
  name: string;
  path: string;
  /** The served model the adapter belongs to (its /v1/models `parent`); null: the first served name. */
  baseModelName: string | null;
}

function invalid(item: string, problem: string): KVError {
  return new KVError('LORA_CONFIG_INVALID', `${problem}: ${item}`, {
    field: 'lora_modules',
    hint: 'Pass --lora-modules name=path, or a JSON object such as \'{"name": "sql", "path": "/adapters/sql", "base_model_name": "kjv-llama"}\'.',
  });
}

export function parseLoraModule(item: string): LoRAModulePath {
  const text = item.trim();
  if (text.startsWith('{')) {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      throw invalid(item, 'Invalid JSON format for --lora-modules');
    }
    const o = raw as Record<string, unknown>;
    const unknown = Object.keys(o).filter((k) => !['name', 'path', 'base_model_name'].includes(k));
    if (typeof o.name !== 'string' || typeof o.path !== 'string' || unknown.length > 0) {
      const problem =
        unknown.length > 0 ? `unexpected field(s) ${unknown.join(', ')}` : 'name and path must be strings';
      throw invalid(item, `Invalid fields for --lora-modules (${problem})`);
    }
    const base = o.base_model_name;
    if (base !== undefined && base !== null && typeof base !== 'string')
      throw invalid(item, 'Invalid fields for --lora-modules (base_model_name must be a string)');
    return { name: o.name, path: o.path, baseModelName: (base as string | null | undefined) ?? null };
  }
  const parts = text.split('=');
  if (parts.length !== 2 || parts[0] === '' || parts[1] === '')
    throw invalid(item, "Invalid format for --lora-modules, expected 'name=path' or JSON");
  return { name: parts[0] as string, path: parts[1] as string, baseModelName: null };
}

export function parseLoraModules(items: readonly string[]): LoRAModulePath[] {
  const out = items.map(parseLoraModule);
  const seen = new Set<string>();
  for (const m of out) {
    if (seen.has(m.name)) throw invalid(m.name, 'The same adapter name is given twice to --lora-modules');
    seen.add(m.name);
  }
  return out;
}
