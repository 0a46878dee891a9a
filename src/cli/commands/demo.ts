/**
 * `kvconnect demo`: prefill/decode disaggregation end to end on this machine (P, D, a proxy
 * and a plain reference server), checked token for token against the reference.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { DEMO_CONNECTORS, DEMO_DEFAULTS, type DemoOptions, MORIIO_BACKENDS } from '../../demo/options.ts';
import type { CliContext } from '../context.ts';

function intArg(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value.trim()) || n < min || n > max) {
      throw new InvalidArgumentError(`${name} must be an integer in ${min}..${max}.`);
    }
    return n;
  };
}

/** Commander's view of the flags: DemoOptions, except `--startup-timeout` lands in `startupTimeout`. */
type DemoFlags = Omit<DemoOptions, 'startupTimeoutS'> & { startupTimeout: number };

type IntField = {
  [K in keyof DemoOptions]: DemoOptions[K] extends number ? K : never;
}[keyof DemoOptions];

/** The plain flags in help order; each takes its default from the DemoOptions field it fills. */
type FlagDef =
  | { kind: 'int'; flag: string; arg: string; help: string; min: number; max: number; field: IntField }
  | { kind: 'bool'; flag: string; help: string };

const FLAGS: readonly FlagDef[] = [
  {
    kind: 'int',
    flag: '--requests',
    arg: '<n>',
    help: 'requests in the workload',
    min: 1,
    max: 10_000,
    field: 'requests',
  },
  {
    kind: 'int',
    flag: '--families',
    arg: '<n>',
    help: 'prompt families; each shares one long prefix',
    min: 1,
    max: 1000,
    field: 'families',
  },
  {
    kind: 'int',
    flag: '--concurrency',
    arg: '<n>',
    help: 'requests in flight at once (after each family’s first request)',
    min: 1,
    max: 1000,
    field: 'concurrency',
  },
  {
    kind: 'int',
    flag: '--max-tokens',
    arg: '<n>',
    help: 'tokens generated per request (greedy)',
    min: 1,
    max: 1024,
    field: 'maxTokens',
  },
  {
    kind: 'int',
    flag: '--prefix-length',
    arg: '<n>',
    help: 'characters of each shared prefix, at least (it ends at a sentence; ~4 per token with kjv-llama, 1 with the byte-level presets)',
    min: 16,
    max: 1500,
    field: 'prefixLength',
  },
  {
    kind: 'bool',
    flag: '--keep-running',
    help: 'leave the servers and the proxy up afterwards and print curl commands; Ctrl-C stops them',
  },
  { kind: 'bool', flag: '--json', help: 'also print the summary as one JSON line at the end' },
  {
    kind: 'int',
    flag: '--startup-timeout',
    arg: '<s>',
    help: 'seconds each server may take to become healthy',
    min: 1,
    max: 3600,
    field: 'startupTimeoutS',
  },
  {
    kind: 'int',
    flag: '--kv-lease-duration',
    arg: '<s>',
    help: 'kv_lease_duration of the servers: how long P keeps KV that D has not read',
    min: 1,
    max: 3600,
    field: 'kvLeaseDuration',
  },
];

export function registerDemoCommand(program: Command, ctx: CliContext): Command {
  const d = DEMO_DEFAULTS;
  const command = program
    .command('demo')
    .description(
      'Run prefill/decode disaggregation end to end: starts a prefill and a decode server, a proxy and a plain reference server on free loopback ports, sends a shared-prefix workload through both, and compares every output',
    )
    .option(
      '--connector <name>',
      `KV connector of the prefill and decode servers (${Object.keys(DEMO_CONNECTORS).join(', ')})`,
      d.connector,
    )
    .option('--model <name>', 'model preset or checkpoint directory every server loads', d.model);
  for (const def of FLAGS) {
    if (def.kind === 'bool') command.option(def.flag, def.help, false);
    else command.option(`${def.flag} ${def.arg}`, def.help, intArg(def.flag, def.min, def.max), d[def.field]);
  }
  return command
    .addOption(
      new Option(
        '--kv-load-failure-policy <policy>',
        'what the decode server does when a KV load fails: recompute the missing part (counted as failed transfers) or fail the request',
      )
        .choices(['recompute', 'fail'])
        .default(d.kvLoadFailurePolicy),
    )
    .addOption(
      new Option(
        '--moriio-backend <backend>',
        'MoRIIOConnector only: xgmi (same host, shm transport) or rdma (tcp transport)',
      )
        .choices(MORIIO_BACKENDS)
        .default(d.moriioBackend),
    )
    .option(
      '--moriio-read-mode',
      'MoRIIOConnector only: READ mode (D reads P’s blocks after the prefill) instead of WRITE (P writes into D’s blocks layer by layer)',
      d.moriioReadMode,
    )
    .addHelpText(
      'after',
      '\nExit code: 0 when every disaggregated output equals the plain output, 1 when one differs or the run fails, 2 for a bad flag.\nSee docs/demo.md for what the table means.',
    )
    .action(async (flags: DemoFlags) => {
      const { startupTimeout, ...rest } = flags;
      const options: DemoOptions = { ...rest, startupTimeoutS: startupTimeout };
      const { runDemo } = await import('../../demo/run-demo.ts');
      const run = await runDemo(options, {
        out: ctx.io.out,
        err: { write: ctx.io.err, isTTY: process.stderr.isTTY === true },
      });
      ctx.exitCode = run.exitCode;
    });
}
