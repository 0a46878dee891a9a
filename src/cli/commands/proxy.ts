/**
 * `kvconnect proxy`: the prefill/decode proxy in front of kvconnect or vLLM servers.
 * The proxy module (and undici) is imported only when the command runs.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { formatErrorText } from '../../errors/index.ts';
import { normaliseUrl } from '../../proxy/backend.ts';
import type { RunningProxy } from '../../proxy/proxy-server.ts';
import { POLICY_NAMES, PROXY_DEFAULTS, type ProxyOptions } from '../../proxy/types.ts';
import { PD_CONNECTORS } from '../../wire/index.ts';
import { type CliContext, EXIT_OK, EXIT_USAGE } from '../context.ts';

const collect = (value: string, previous: string[]): string[] => [...previous, value];

function intArg(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer >= ${min}.`);
    return n;
  };
}

function weightArg(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0)
      throw new InvalidArgumentError(`${name} must be a number >= 0; received ${JSON.stringify(value)}.`);
    return n;
  };
}

/** One `URL=ENDPOINT` pair of --kv-events, added to the ones before it. */
function kvEventsPair(value: string, previous: Record<string, string>): Record<string, string> {
  const eq = value.lastIndexOf('=');
  if (eq <= 0 || !/^(tcp|ipc|inproc):\/\//.test(value.slice(eq + 1))) {
    throw new InvalidArgumentError(
      `expected BACKEND_URL=ENDPOINT, e.g. http://127.0.0.1:8000=tcp://127.0.0.1:5557; received ${JSON.stringify(value)}.`,
    );
  }
  return { ...previous, [normaliseUrl(value.slice(0, eq))]: value.slice(eq + 1) };
}

export interface ProxyCommandHooks {
  /** Called once the proxy listens (tests use it to talk to and close the proxy). */
  onStarted?: (proxy: RunningProxy) => void;
}

export function registerProxyCommand(
  program: Command,
  hooks: ProxyCommandHooks = {},
  ctx?: CliContext,
): Command {
  return program
    .command('proxy')
    .description(
      "Prefill/decode proxy: runs the P/D flow of the backends' KV connector (speaks vLLM's HTTP protocol)",
    )
    .option('--prefill <url>', 'prefill server URL (repeatable)', collect, [])
    .option('--decode <url>', 'decode server URL (repeatable)', collect, [])
    .requiredOption('--port <n>', 'port to listen on (0 = any free port)', intArg('--port', 0))
    .option('--host <host>', 'address to listen on', PROXY_DEFAULTS.host)
    .addOption(
      new Option('--policy <name>', 'routing policy').choices(POLICY_NAMES).default(PROXY_DEFAULTS.policy),
    )
    .addOption(
      new Option('--kv-connector <name>', 'P/D flow; default: ask each backend GET /kvconnect/info').choices(
        PD_CONNECTORS,
      ),
    )
    .option(
      '--discovery-port <n>',
      'listen for MoRIIO registration pings (HTTP POST /register)',
      intArg('--discovery-port', 0),
    )
    .option('--discovery-host <host>', 'address of the discovery listener', PROXY_DEFAULTS.discoveryHost)
    .option(
      '--discovery-ttl-ms <ms>',
      'drop an instance after this long without a ping',
      intArg('--discovery-ttl-ms', 1),
      PROXY_DEFAULTS.discoveryTtlMs,
    )
    .option(
      '--health-interval-ms <ms>',
      'period of GET /health checks',
      intArg('--health-interval-ms', 10),
      PROXY_DEFAULTS.healthIntervalMs,
    )
    .option(
      '--health-timeout-ms <ms>',
      'deadline of one health check',
      intArg('--health-timeout-ms', 1),
      PROXY_DEFAULTS.healthTimeoutMs,
    )
    .option(
      '--prefix-chunk-bytes <n>',
      'chunk size of prefix_aware hashing',
      intArg('--prefix-chunk-bytes', 1),
      PROXY_DEFAULTS.prefixChunkBytes,
    )
    .option(
      '--prefix-cache-entries <n>',
      'prefix_aware LRU capacity',
      intArg('--prefix-cache-entries', 1),
      PROXY_DEFAULTS.prefixCacheEntries,
    )
    .option('--prefill-engine-id <id>', 'NIXL push: the prefill engine id (else from /kvconnect/info)')
    .option('--prefill-side-channel-host <host>', 'NIXL push: the prefill side-channel host')
    .option(
      '--prefill-side-channel-port <n>',
      'NIXL push: the prefill side-channel port',
      intArg('--prefill-side-channel-port', 1),
    )
    .option(
      '--prefill-tp-size <n>',
      'NIXL push: the prefill tensor-parallel size',
      intArg('--prefill-tp-size', 1),
    )
    .option(
      '--prefill-pp-size <n>',
      'NIXL push: the prefill pipeline-parallel size',
      intArg('--prefill-pp-size', 1),
    )
    .option(
      '--p2p-connector-port <n>',
      "OffloadingConnector: the prefill engines' p2p tier base port (llm-d's flag; else from /kvconnect/info)",
      intArg('--p2p-connector-port', 1),
    )
    .addOption(new Option('--moriio-mode <mode>', 'MoRIIO: force READ or WRITE').choices(['READ', 'WRITE']))
    .option('--moriio-decrement-max-tokens', "MoRIIO: send D max_tokens - 1 as vLLM's toy proxy does", false)
    .option(
      '--no-params-ahead',
      "NIXL pull: wait for P's answer before sending D, instead of sending D when P announces its kv_transfer_params ahead of its prefill (a 103 response)",
    )
    .option(
      '--no-prefill-fallback',
      'answer 503/502 when no prefill instance is healthy or the prefill leg fails, instead of serving the request on a decode instance alone',
    )
    .option(
      '--prefill-timeout-ms <ms>',
      'deadline of the prefill leg; past it the request falls back to a decode instance',
      intArg('--prefill-timeout-ms', 1),
      PROXY_DEFAULTS.prefillTimeoutMs,
    )
    .option(
      '--max-retries <n>',
      'retries of one request: a failed prefill or decode leg sent to another instance, or a stream resumed there (0 = none)',
      intArg('--max-retries', 0),
      PROXY_DEFAULTS.maxRetries,
    )
    .option(
      '--retry-deadline-ms <ms>',
      'no retry or resume starts later than this after the request arrived',
      intArg('--retry-deadline-ms', 1),
      PROXY_DEFAULTS.retryDeadlineMs,
    )
    .option(
      '--no-stream-resume',
      'do not continue a stream whose decode instance failed mid-way on another one (the client stream ends where it broke)',
    )
    .option(
      '--unhealthy-interval-ms <ms>',
      'period of the health checks of a backend marked down (0 = with the others), so a restarted one is back at once',
      intArg('--unhealthy-interval-ms', 0),
      PROXY_DEFAULTS.unhealthyIntervalMs,
    )
    .option(
      '--tokenizer <dir>',
      "kv_aware: the model's tokenizer (directory with tokenizer.json, or a preset name)",
    )
    .option(
      '--kv-events <url=endpoint>',
      'kv_aware: where a backend that does not report it (vLLM) publishes KV events, e.g. http://10.0.0.2:8000=tcp://10.0.0.2:5557 (repeatable)',
      kvEventsPair,
      {},
    )
    .option(
      '--kv-events-block-size <n>',
      "kv_aware: block size of backends that do not report theirs (vLLM's --block-size)",
      intArg('--kv-events-block-size', 1),
      PROXY_DEFAULTS.kvEventsBlockSize,
    )
    .addOption(
      new Option(
        '--kv-events-hash-algo <algo>',
        'kv_aware: block hash algorithm of backends that do not report theirs',
      )
        .choices(['sha256_cbor', 'sha256', 'xxhash_cbor', 'xxhash'])
        .default(PROXY_DEFAULTS.kvEventsHashAlgo),
    )
    .option(
      '--kv-aware-overlap-credit <x>',
      'kv_aware: queued-prefill tokens one cached prompt token is worth (> 1 favours cache hits over balance)',
      weightArg('--kv-aware-overlap-credit'),
      PROXY_DEFAULTS.kvAwareOverlapCredit,
    )
    .option(
      '--kv-aware-running-cost <tokens>',
      'kv_aware: tokens charged per request in flight on a backend past its prefill',
      weightArg('--kv-aware-running-cost'),
      PROXY_DEFAULTS.kvAwareRunningCost,
    )
    .option(
      '--dry-run',
      'check the options as a start would (backends given, connector, kv_aware tokenizer and weights), print what would run, and exit 0 (2 when invalid) without listening or calling a backend',
    )
    .action(async (o: Record<string, unknown>) => {
      const push: ProxyOptions['push'] = {};
      if (o['prefillEngineId'] !== undefined) push.engineId = String(o['prefillEngineId']);
      if (o['prefillSideChannelHost'] !== undefined) push.host = String(o['prefillSideChannelHost']);
      if (o['prefillSideChannelPort'] !== undefined) push.port = o['prefillSideChannelPort'] as number;
      if (o['prefillTpSize'] !== undefined) push.tpSize = o['prefillTpSize'] as number;
      if (o['prefillPpSize'] !== undefined) push.ppSize = o['prefillPpSize'] as number;
      const options: ProxyOptions = {
        prefill: o['prefill'] as string[],
        decode: o['decode'] as string[],
        port: o['port'] as number,
        host: o['host'] as string,
        policy: o['policy'] as ProxyOptions['policy'],
        discoveryHost: o['discoveryHost'] as string,
        discoveryTtlMs: o['discoveryTtlMs'] as number,
        healthIntervalMs: o['healthIntervalMs'] as number,
        healthTimeoutMs: o['healthTimeoutMs'] as number,
        prefixChunkBytes: o['prefixChunkBytes'] as number,
        prefixCacheEntries: o['prefixCacheEntries'] as number,
        push,
        moriioDecrementMaxTokens: o['moriioDecrementMaxTokens'] === true,
        prefillFallback: o['prefillFallback'] !== false,
        paramsAhead: o['paramsAhead'] !== false,
        prefillTimeoutMs: o['prefillTimeoutMs'] as number,
        maxRetries: o['maxRetries'] as number,
        retryDeadlineMs: o['retryDeadlineMs'] as number,
        streamResume: o['streamResume'] !== false,
        unhealthyIntervalMs: o['unhealthyIntervalMs'] as number,
        kvEvents: o['kvEvents'] as Record<string, string>,
        kvEventsBlockSize: o['kvEventsBlockSize'] as number,
        kvEventsHashAlgo: o['kvEventsHashAlgo'] as string,
        kvAwareOverlapCredit: o['kvAwareOverlapCredit'] as number,
        kvAwareRunningCost: o['kvAwareRunningCost'] as number,
        ...(o['tokenizer'] === undefined ? {} : { tokenizer: String(o['tokenizer']) }),
        ...(o['kvConnector'] === undefined
          ? {}
          : { kvConnector: o['kvConnector'] as ProxyOptions['kvConnector'] & string }),
        ...(o['discoveryPort'] === undefined ? {} : { discoveryPort: o['discoveryPort'] as number }),
        ...(o['moriioMode'] === undefined ? {} : { moriioMode: o['moriioMode'] as 'READ' | 'WRITE' }),
        ...(o['p2pConnectorPort'] === undefined ? {} : { p2pConnectorPort: o['p2pConnectorPort'] as number }),
      };
      if (o['dryRun'] === true) {
        const { validateProxyOptions } = await import('../../proxy/proxy-server.ts');
        const io = ctx?.io ?? {
          out: (t: string) => void process.stdout.write(t),
          err: (t: string) => void process.stderr.write(t),
        };
        let code = EXIT_OK;
        try {
          validateProxyOptions(options);
          io.out(
            `kvconnect proxy --dry-run: valid; would listen on ${options.host}:${options.port}, policy ${options.policy}, ${options.prefill.length} prefill, ${options.decode.length} decode\n`,
          );
        } catch (e) {
          io.err(`${formatErrorText(e)}\n`);
          code = EXIT_USAGE;
        }
        if (ctx) ctx.exitCode = code;
        else process.exitCode = code;
        return;
      }
      const { startProxy } = await import('../../proxy/proxy-server.ts');
      let proxy: RunningProxy;
      try {
        proxy = await startProxy(options);
      } catch (e) {
        console.error(formatErrorText(e));
        process.exitCode = 2;
        return;
      }
      const stop = (): void => {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
        void proxy.close();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      hooks.onStarted?.(proxy);
    });
}
