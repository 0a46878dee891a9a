/**
 * What `kvconnect demo` can be asked to do, its defaults, and which connectors it can run
 * as a prefill/decode pair.
 */
import { DEFAULT_MODEL } from '../config/model-presets.ts';
import { getBuiltinConnector } from '../connector/registry.ts';
import { KVError } from '../errors/kv-error.ts';

export interface DemoOptions {
  /** KV connector of the prefill and decode servers. */
  connector: string;
  /** Built-in model (or checkpoint directory) every server loads. */
  model: string;
  /** Requests in the workload (each is sent through the proxy and to the reference). */
  requests: number;
  /** Prompt families: each shares one long prefix. */
  families: number;
  /** Requests in flight at once after each family's first request. */
  concurrency: number;
  /** Tokens generated per request (greedy). */
  maxTokens: number;
  /** Characters (at least; it ends at a sentence) of each family's shared prefix. */
  prefixLength: number;
  /** Leave the servers and the proxy up after the run, until Ctrl-C. */
  keepRunning: boolean;
  /** Print the summary as one JSON line at the end. */
  json: boolean;
  /** Seconds a single server may take to become healthy. */
  startupTimeoutS: number;
  /** `kv_lease_duration` of the prefill server (seconds). */
  kvLeaseDuration: number;
  /** What D does when a KV load fails: recompute the prompt (outputs stay identical) or fail. */
  kvLoadFailurePolicy: 'recompute' | 'fail';
  /** MoRIIO only: `xgmi` (same host, shm transport) or `rdma` (tcp transport). */
  moriioBackend: MoriioBackend;
  /** MoRIIO only: READ mode (D pulls after P finished) instead of WRITE (P pushes layer by layer). */
  moriioReadMode: boolean;
}

export const MORIIO_BACKENDS = ['xgmi', 'rdma'] as const;
export type MoriioBackend = (typeof MORIIO_BACKENDS)[number];

export const DEMO_DEFAULTS: DemoOptions = {
  connector: 'NixlConnector',
  model: DEFAULT_MODEL,
  requests: 24,
  families: 4,
  concurrency: 4,
  maxTokens: 16,
  prefixLength: 384,
  keepRunning: false,
  json: false,
  startupTimeoutS: 60,
  kvLeaseDuration: 30,
  kvLoadFailurePolicy: 'fail',
  moriioBackend: 'xgmi',
  moriioReadMode: false,
};

/** Connectors the demo knows how to wire as P and D, with the flow the proxy runs. */
export const DEMO_CONNECTORS = {
  NixlConnector: 'NixlConnector',
  NixlPullConnector: 'NixlConnector',
  NixlPushConnector: 'NixlPushConnector',
  MoRIIOConnector: 'MoRIIOConnector',
} as const;

export type DemoConnector = keyof typeof DEMO_CONNECTORS;
export type DemoFlow = (typeof DEMO_CONNECTORS)[DemoConnector];

function isDemoConnector(name: string): name is DemoConnector {
  return Object.hasOwn(DEMO_CONNECTORS, name);
}

/** The connector to run, or a KVError saying why it cannot be demonstrated (yet). */
export function resolveDemoConnector(name: string): DemoConnector {
  const choices = Object.keys(DEMO_CONNECTORS).join(', ');
  if (!isDemoConnector(name)) {
    const known = getBuiltinConnector(name);
    throw new KVError(
      'DEMO_CONNECTOR_UNSUPPORTED',
      known
        ? `The demo runs prefill/decode disaggregation; ${name} is not a prefill/decode connector it can wire up.`
        : `Unknown connector ${JSON.stringify(name)} for the demo.`,
      { field: 'connector', hint: `Pass --connector with one of: ${choices}.` },
    );
  }
  const entry = getBuiltinConnector(name);
  if (entry !== undefined && entry.status !== 'available') {
    throw new KVError(
      'DEMO_CONNECTOR_NOT_AVAILABLE',
      `${name} is not available yet in this version of kvconnect, so the demo cannot run it.`,
      {
        field: 'connector',
        hint: `Run the demo with --connector NixlConnector or NixlPushConnector instead (${name} needs ${entry.needs}).`,
      },
    );
  }
  return name;
}

/** The flow the proxy runs for a connector (NixlPullConnector is NixlConnector's pull flow). */
export function demoFlow(connector: DemoConnector): DemoFlow {
  return DEMO_CONNECTORS[connector];
}

/**
 * Whether the connector's servers export the transfer metrics the table reads (bytes,
 * transfer time, failures): `vllm:nixl_*` for NIXL, `vllm:moriio_*` for MoRIIO. When false
 * those rows say n/a; every connector the demo runs exports them today.
 */
export function exportsTransferMetrics(connector: DemoConnector): boolean {
  const flow: DemoFlow = demoFlow(connector);
  return flow === 'NixlConnector' || flow === 'NixlPushConnector' || flow === 'MoRIIOConnector';
}

/** How KV moves, for the title and the JSON: pull/push for NIXL, READ/WRITE for MoRIIO. */
export function transferMode(
  connector: DemoConnector,
  options: DemoOptions,
): 'pull' | 'push' | 'READ' | 'WRITE' {
  switch (demoFlow(connector)) {
    case 'NixlConnector':
      return 'pull';
    case 'NixlPushConnector':
      return 'push';
    case 'MoRIIOConnector':
      return options.moriioReadMode ? 'READ' : 'WRITE';
  }
}
