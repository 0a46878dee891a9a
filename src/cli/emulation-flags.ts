/**
 * `serve`'s emulation flags (llm-d-inference-sim's latency options, --mode, --speedup, the
 * roofline target) and `--config FILE.yaml`, derived from the table in
 * src/config/emulation-config.ts; docs/emulation.md explains them.
 */
import type { Command } from 'commander';
import { EMULATION_OPTION_NAMES, EMULATION_OPTIONS } from '../config/emulation-config.ts';

function camel(name: string): string {
  return name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

export function addEmulationOptions(command: Command): Command {
  command.option(
    '--config <file>',
    "llm-d-inference-sim's YAML configuration (its latency profiles load unchanged); flags win over the file",
  );
  for (const name of EMULATION_OPTION_NAMES) {
    const def = EMULATION_OPTIONS[name];
    if (!def) continue;
    const choices = def.choices ? ` (one of: ${def.choices.map((c) => c || '""').join(', ')})` : '';
    command.option(`--${name} <value>`, `${def.help}${choices}`);
  }
  return command;
}

/** The emulation options the user passed, under their kebab-case names. */
export function emulationOptionsFromCommander(opts: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of EMULATION_OPTION_NAMES) {
    const value = opts[camel(name)];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
