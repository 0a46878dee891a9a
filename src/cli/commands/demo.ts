/**
 * `kvconnect demo`: prefill/decode disaggregation end to end on this machine (P, D, a proxy
 * and a plain reference server), checked token for token against the reference.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { DEMO_CONNECTORS, DEMO_DEFAULTS, type DemoOptions } from '../../demo/options.ts';
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

interface DemoFlags {
  connector: string;
  model: string;
  requests: number;
  families: number;
  concurrency: number;
  maxTokens: number;
  prefixLength: number;
  keepRunning: boolean;
  json: boolean;
  startupTimeout: number;
  kvLeaseDuration: number;
  kvLoadFailurePolicy: 'recompute' | 'fail';
}

export function registerDemoCommand(program: Command, ctx: CliContext): Command {
  const d = DEMO_DEFAULTS;
  return program
    .command('demo')
    .description(
      'Run prefill/decode disaggregation end to end: starts a prefill and a decode server, a proxy and a plain reference server on free loopback ports, sends a shared-prefix workload through both, and compares every output',
    )
    .option(
      '--connector <name>',
      `KV connector of the prefill and decode servers (${Object.keys(DEMO_CONNECTORS).join(', ')})`,
      d.connector,
    )
    .option('--model <name>', 'model preset or checkpoint directory every server loads', d.model)
    .option('--requests <n>', 'requests in the workload', intArg('--requests', 1, 10_000), d.requests)
    .option(
      '--families <n>',
      'prompt families; each shares one long prefix',
      intArg('--families', 1, 1000),
      d.families,
    )
    .option(
      '--concurrency <n>',
      'requests in flight at once (after each family’s first request)',
      intArg('--concurrency', 1, 1000),
      d.concurrency,
    )
    .option(
      '--max-tokens <n>',
      'tokens generated per request (greedy)',
      intArg('--max-tokens', 1, 1024),
      d.maxTokens,
    )
    .option(
      '--prefix-length <n>',
      'characters (= tokens with the byte-level tiny tokenizer) of each shared prefix',
      intArg('--prefix-length', 16, 1500),
      d.prefixLength,
    )
    .option(
      '--keep-running',
      'leave the servers and the proxy up afterwards and print curl commands; Ctrl-C stops them',
      false,
    )
    .option('--json', 'also print the summary as one JSON line at the end', false)
    .option(
      '--startup-timeout <s>',
      'seconds each server may take to become healthy',
      intArg('--startup-timeout', 1, 3600),
      d.startupTimeoutS,
    )
    .option(
      '--kv-lease-duration <s>',
      'kv_lease_duration of the servers: how long P keeps KV that D has not read',
      intArg('--kv-lease-duration', 1, 3600),
      d.kvLeaseDuration,
    )
    .addOption(
      new Option(
        '--kv-load-failure-policy <policy>',
        'what the decode server does when a KV load fails: recompute the missing part (counted as failed transfers) or fail the request',
      )
        .choices(['recompute', 'fail'])
        .default(d.kvLoadFailurePolicy),
    )
    .addHelpText(
      'after',
      '\nExit code: 0 when every disaggregated output equals the plain output, 1 when one differs or the run fails, 2 for a bad flag.\nSee docs/demo.md for what the table means.',
    )
    .action(async (flags: DemoFlags) => {
      const options: DemoOptions = {
        connector: flags.connector,
        model: flags.model,
        requests: flags.requests,
        families: flags.families,
        concurrency: flags.concurrency,
        maxTokens: flags.maxTokens,
        prefixLength: flags.prefixLength,
        keepRunning: flags.keepRunning,
        json: flags.json,
        startupTimeoutS: flags.startupTimeout,
        kvLeaseDuration: flags.kvLeaseDuration,
        kvLoadFailurePolicy: flags.kvLoadFailurePolicy,
      };
      const { runDemo } = await import('../../demo/run-demo.ts');
      const run = await runDemo(options, {
        out: ctx.io.out,
        err: { write: ctx.io.err, isTTY: process.stderr.isTTY === true },
      });
      ctx.exitCode = run.exitCode;
    });
}
