/**
 * `kvconnect proxy`: the prefill/decode proxy in front of kvconnect or vLLM servers.
 * The proxy module (and undici) is imported only when the command runs.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { formatErrorText } from '../../errors/index.ts';
import type { RunningProxy } from '../../proxy/proxy-server.ts';
import { CONNECTOR_KINDS, POLICY_NAMES, PROXY_DEFAULTS, type ProxyOptions } from '../../proxy/types.ts';

const collect = (value: string, previous: string[]): string[] => [...previous, value];

function intArg(name: string, min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer >= ${min}.`);
    return n;
  };
}

export interface ProxyCommandHooks {
  /** Called once the proxy listens (tests use it to talk to and close the proxy). */
  onStarted?: (proxy: RunningProxy) => void;
}

export function registerProxyCommand(program: Command, hooks: ProxyCommandHooks = {}): Command {
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
        CONNECTOR_KINDS,
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
    .addOption(new Option('--moriio-mode <mode>', 'MoRIIO: force READ or WRITE').choices(['READ', 'WRITE']))
    .option('--moriio-decrement-max-tokens', "MoRIIO: send D max_tokens - 1 as vLLM's toy proxy does", false)
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
        ...(o['kvConnector'] === undefined
          ? {}
          : { kvConnector: o['kvConnector'] as ProxyOptions['kvConnector'] & string }),
        ...(o['discoveryPort'] === undefined ? {} : { discoveryPort: o['discoveryPort'] as number }),
        ...(o['moriioMode'] === undefined ? {} : { moriioMode: o['moriioMode'] as 'READ' | 'WRITE' }),
      };
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
