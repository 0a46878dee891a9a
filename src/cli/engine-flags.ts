/**
 * Commander flags derived from the engine option table (src/config/engine-options.ts), so
 * every command that builds an engine config has the same flags, help and defaults.
 */
import type { Command } from 'commander';
import {
  ENGINE_OPTION_NAMES,
  ENGINE_OPTIONS,
  type EngineOptionDef,
  optionFlag,
} from '../config/engine-options.ts';

function camel(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function describeDefault(def: EngineOptionDef<unknown>): string {
  if (def.kind === 'tristate') return 'auto';
  return def.default === null ? 'unset' : String(def.default);
}

/** Adds one flag (or a --x / --no-x pair) per engine option; values stay strings until validated. */
export function addEngineOptions(command: Command, only?: readonly string[]): Command {
  for (const name of ENGINE_OPTION_NAMES) {
    if (only && !only.includes(name)) continue;
    const def = ENGINE_OPTIONS[name] as EngineOptionDef<unknown>;
    const flag = optionFlag(name);
    const choices = def.choices ? ` (one of: ${def.choices.join(', ')})` : '';
    if (def.kind === 'bool' || def.kind === 'tristate') {
      command.option(flag, `${def.help} (default: ${describeDefault(def)})`);
      command.option(`--no-${flag.slice(2)}`, `opposite of ${flag}`);
    } else {
      const arg = def.kind === 'int' ? '<n>' : '<value>';
      command.option(`${flag} ${arg}`, `${def.help}${choices} (default: ${describeDefault(def)})`);
    }
  }
  return command;
}

/** The engine options the user actually passed, under their snake_case names. */
export function engineOptionsFromCommander(opts: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of ENGINE_OPTION_NAMES) {
    const value = opts[camel(name)];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
