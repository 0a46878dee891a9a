/**
 * `serve`'s emulation flags (llm-d-inference-sim's latency options, --mode, --speedup, the
 * roofline target) and `--config FILE.yaml`, derived from the table in
 * src/config/emulation-config.ts; docs/emulation.md explains them.
 */
import type { Command } from 'commander';
import { EMULATION_OPTION_NAMES, EMULATION_OPTIONS } from '../config/emulation-config.ts';
import { STEERING_OPTION_NAMES, STEERING_OPTIONS } from '../config/steering-options.ts';

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
  for (const name of STEERING_OPTION_NAMES) {
    const def = STEERING_OPTIONS[name];
    if (def) command.option(`--${name} ${def.variadic ? '<values...>' : '<value>'}`, def.help);
  }
  return command;
}

/** The steering options the user passed (failures, fake metrics, ...), under their kebab-case names. */
export function steeringOptionsFromCommander(opts: Record<string, unknown>): Record<string, unknown> {
  return passedOptions(opts, STEERING_OPTION_NAMES);
}

/** The emulation options the user passed, under their kebab-case names. */
export function emulationOptionsFromCommander(opts: Record<string, unknown>): Record<string, unknown> {
  return passedOptions(opts, EMULATION_OPTION_NAMES);
}

function passedOptions(opts: Record<string, unknown>, names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of names) {
    const value = opts[camel(name)];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
