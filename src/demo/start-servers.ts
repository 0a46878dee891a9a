/**
 * Starts the demo's servers: P, D and the reference as `kvconnect serve` processes, then the
 * proxy (in this process) in front of P and D, with the flow and mode of the connector. A
 * start that lost a picked port to another program is retried once with new ports.
 */
import type { KVError } from '../errors/kv-error.ts';
import type { RunningProxy } from '../proxy/proxy-server.ts';
import { DEMO_DEFAULTS, type DemoOptions, demoFlow, resolveDemoConnector, transferMode } from './options.ts';
import { type ProcessGroup, type ServeProcess, startServe } from './processes.ts';
import type { Progress } from './progress.ts';
import { type DemoTopology, planTopology } from './topology.ts';

export interface Servers {
  prefill: ServeProcess;
  decode: ServeProcess;
  reference: ServeProcess;
  proxy: RunningProxy;
}

/** What is running so far, for cleanup whatever step fails or is interrupted. */
export interface Running {
  group: ProcessGroup;
  proxy?: RunningProxy;
  servers?: Servers;
}

/** A start that failed because a port the demo picked was taken in between (worth one retry). */
function portTaken(e: unknown): boolean {
  const text = `${(e as Error)?.message ?? ''}\n${(e as KVError)?.hint ?? ''}`;
  return /EADDRINUSE|PORT_IN_USE|already in use/i.test(text);
}

async function startTopology(
  topology: DemoTopology,
  options: DemoOptions,
  group: ProcessGroup,
): Promise<[ServeProcess, ServeProcess, ServeProcess]> {
  const timeoutMs = options.startupTimeoutS * 1000;
  const started = await Promise.allSettled([
    startServe('prefill', topology.prefillArgs, { timeoutMs, group }),
    startServe('decode', topology.decodeArgs, { timeoutMs, group }),
    startServe('reference', topology.referenceArgs, { timeoutMs, group }),
  ]);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await Promise.all(started.map((r) => (r.status === 'fulfilled' ? r.value.stop() : undefined)));
    throw failed.reason;
  }
  return started.map((r) => (r as PromiseFulfilledResult<ServeProcess>).value) as [
    ServeProcess,
    ServeProcess,
    ServeProcess,
  ];
}

export async function startServers(
  options: DemoOptions,
  running: Running,
  progress: Progress,
): Promise<Servers> {
  const group = running.group;
  const connector = resolveDemoConnector(options.connector);
  const mode = transferMode(connector, options);
  if (
    demoFlow(connector) !== 'MoRIIOConnector' &&
    (options.moriioReadMode || options.moriioBackend !== DEMO_DEFAULTS.moriioBackend)
  ) {
    progress.note(
      `note: --moriio-read-mode and --moriio-backend apply to MoRIIOConnector only; ${connector} ignores them`,
    );
  }
  progress.note(
    `starting prefill (${connector}, ${mode}, kv_producer), decode (kv_consumer) and reference servers…`,
  );
  let topology = await planTopology(connector, options);
  let servers: [ServeProcess, ServeProcess, ServeProcess];
  try {
    servers = await startTopology(topology, options, group);
  } catch (e) {
    if (!portTaken(e)) throw e;
    progress.note('a port the demo picked was taken meanwhile; picking new ports and starting again…');
    topology = await planTopology(connector, options);
    servers = await startTopology(topology, options, group);
  }
  const [prefill, decode, reference] = servers;
  const { resolveProxyOptions, startProxy } = await import('../proxy/proxy-server.ts');
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [prefill.url],
      decode: [decode.url],
      port: 0,
      kvConnector: topology.proxyFlow,
      push: topology.push,
      ...(topology.moriioMode ? { moriioMode: topology.moriioMode } : {}),
    }),
  );
  running.proxy = proxy;
  progress.note(
    `prefill ${prefill.url} · decode ${decode.url} · proxy ${proxy.url} · reference ${reference.url}`,
  );
  return { prefill, decode, reference, proxy };
}
