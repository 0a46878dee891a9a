/**
 * Puts the fault relay between a NIXL decode engine and a prefill engine's transfer agent:
 * a side channel of our own serves P's real handshake payload with the agent endpoint
 * rewritten to the relay, and `route()` points P's kv_transfer_params at that side channel.
 */
import { fetchRemoteMetadata, SideChannelServer } from '../../../src/transfer/index.ts';
import { type FaultRelay, type FrameHook, startFaultRelay } from '../../helpers/fault-relay.ts';

export interface RelayedPeer {
  readonly relay: FaultRelay;
  /** P's kv_transfer_params, sent to the relayed side channel instead. */
  route(params: Record<string, unknown>): Record<string, unknown>;
  close(): Promise<void>;
}

type Payload = { agent_metadata: { agent: { endpoints: Record<string, unknown> } } };

export async function relayedPeer(params: Record<string, unknown>, frames?: FrameHook): Promise<RelayedPeer> {
  const { metadata } = await fetchRemoteMetadata(
    String(params['remote_host']),
    Number(params['remote_port']),
    0,
    { timeoutMs: 10_000 },
  );
  const payload = metadata as Payload;
  const agent = payload.agent_metadata.agent;
  const target = agent.endpoints['tcp'] as { host: string; port: number };
  const relay = await startFaultRelay({
    targetHost: target.host,
    targetPort: target.port,
    ...(frames ? { frames } : {}),
  });
  const rewritten: Payload = {
    ...payload,
    agent_metadata: {
      ...payload.agent_metadata,
      // tcp only, so even a same-host decode engine goes through the relay.
      agent: { ...agent, endpoints: { tcp: { host: '127.0.0.1', port: relay.port } } },
    },
  };
  const side = new SideChannelServer({
    host: '127.0.0.1',
    port: 0,
    getMetadata: (rank) => (rank === 0 ? rewritten : undefined),
  });
  const { port } = await side.start();
  return {
    relay,
    route: (p) => ({ ...p, remote_host: '127.0.0.1', remote_port: port }),
    close: async () => {
      await side.close();
      await relay.close();
    },
  };
}
