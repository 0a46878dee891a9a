/**
 * The shared connector conformance suite (p2p mode) for NixlConnector (pull) and
 * NixlPushConnector over tcp, and push over shm. Corruption is real: an outgoing transform on
 * P's transfer agent (fault-connectors.ts) flips one outgoing byte of the damaged request's
 * blocks after the per-block checksum was computed, so D must detect it.
 */
import {
  type ConformanceContext,
  type CorruptionTarget,
  runConnectorConformance,
} from '../helpers/conformance.ts';
import { agentFaults, faultConnectorsConfig } from '../helpers/fault-connectors.ts';

type Connector = 'NixlConnector' | 'NixlPushConnector';

interface CorruptionState {
  /** P's block ids of the request to damage; null = not armed. */
  targets: Set<number> | null;
  done: boolean;
}

function stateOf(ctx: ConformanceContext): CorruptionState {
  const s = ctx.state['corruption'] as CorruptionState | undefined;
  if (s) return s;
  const fresh: CorruptionState = { targets: null, done: false };
  ctx.state['corruption'] = fresh;
  return fresh;
}

function config(
  connector: Connector,
  backend: 'TCP' | 'SHM',
  role: 'kv_producer' | 'kv_consumer',
  faults: boolean,
) {
  const c = {
    kv_connector: connector,
    kv_role: role,
    kv_connector_extra_config: { backends: [backend], side_channel_port: 0 },
  };
  return faults ? faultConnectorsConfig(c) : c;
}

/** The agents take the transform when they are created: install it before the engines exist. */
function installCorruptionHook(ctx: ConformanceContext): void {
  const state = stateOf(ctx);
  agentFaults.outgoing = (view, run) => {
    const targets = state.targets;
    if (!targets || state.done) return view;
    for (let i = 0; i < run.count; i++) {
      if (!targets.has(run.first + i)) continue;
      state.done = true;
      const copy = new Uint8Array(view);
      const at = i * (view.length / run.count);
      copy[at] = (copy[at] ?? 0) ^ 0xff;
      return copy;
    }
    return view;
  };
}

function armCorruption(ctx: ConformanceContext, target: CorruptionTarget): void {
  const ids = (target.kvTransferParams?.['remote_block_ids'] as number[][] | undefined) ?? [];
  // Block 0 of P's first group: D recomputes from there, well past its usual ≤ 1 token.
  const first = ids.flat().filter((id) => id !== 0)[0];
  if (first === undefined) throw new Error('the producer returned no blocks to damage');
  stateOf(ctx).targets = new Set([first]);
}

function suite(
  connector: Connector,
  backend: 'TCP' | 'SHM',
  models: ('tiny' | 'tiny-hybrid')[],
  corrupt: boolean,
) {
  runConnectorConformance({
    name: `${connector} (${backend.toLowerCase()})`,
    mode: 'p2p',
    models,
    supportsHybrid: true,
    makeProducerConfig: () => config(connector, backend, 'kv_producer', corrupt),
    makeConsumerConfig: () => config(connector, backend, 'kv_consumer', corrupt),
    ...(corrupt
      ? {
          setup: installCorruptionHook,
          teardown: () => {
            agentFaults.outgoing = undefined;
          },
          corrupt: armCorruption,
          corruptionKinds: ['corrupt'] as const satisfies CorruptionTarget['kind'][],
        }
      : {}),
  });
}

suite('NixlConnector', 'TCP', ['tiny', 'tiny-hybrid'], true);
suite('NixlPushConnector', 'TCP', ['tiny', 'tiny-hybrid'], true);
suite('NixlPushConnector', 'SHM', ['tiny-hybrid'], false);
