/**
 * Two in-thread transfer agents, a reader/writer A and an owner B, where A reaches B only
 * through the fault relay (test/helpers/fault-relay.ts). Shared by the tcp and shm fault tests.
 */
import {
  type AgentMetadata,
  type AgentSeams,
  InThreadTransferAgent,
  type TransferAgentOptions,
} from '../../../src/transfer/index.ts';
import { type FaultRelay, type FrameHook, startFaultRelay } from '../../helpers/fault-relay.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { makeRegion } from '../../transfer/helpers/pattern.ts';

const open: { close(): Promise<unknown> }[] = [];

/** Closes every agent and relay made so far (call it from `after`). */
export async function closeRelayedAgents(): Promise<void> {
  for (const c of open.splice(0)) await c.close();
}

/** Agents use tcp unless the options name other backends; regions are mappable when the addon is built. */
export async function throughRelay(
  blockBytes: number,
  numBlocks: number,
  frames: FrameHook,
  aOptions: Partial<TransferAgentOptions> = {},
  bOptions: Partial<TransferAgentOptions> = {},
  bSeams: AgentSeams = {},
) {
  const a = await InThreadTransferAgent.create({
    engineId: 'A',
    backends: ['TCP'],
    chunkBytes: blockBytes,
    ...aOptions,
  });
  const b = await InThreadTransferAgent.create(
    {
      engineId: 'B',
      backends: ['TCP'],
      chunkBytes: blockBytes,
      ...bOptions,
    },
    bSeams,
  );
  open.push(a, b);
  const ra = makeRegion(0, blockBytes, numBlocks, 0x1111);
  const rb = makeRegion(0, blockBytes, numBlocks, 0x2222);
  a.registerMemory([ra]);
  b.registerMemory([rb]);
  const relay = await startFaultRelay({ targetPort: b.metadata().endpoints.tcp.port, frames });
  open.push(relay);
  const published = b.metadata();
  const meta: AgentMetadata = {
    ...published,
    endpoints: { ...published.endpoints, tcp: { host: '127.0.0.1', port: relay.port } },
  };
  const remote = a.addRemoteAgent(meta);
  return { a, b, ra, rb, relay, remote };
}

export const all = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
export const whole = (n: number) => [
  { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: n },
];

/** Waits until the relay forwards nothing more for a while (its queues drained or held). */
export async function settled(relay: FaultRelay): Promise<void> {
  let last = -1;
  await waitUntil(
    'the relay to stop forwarding',
    () => {
      const now = relay.bytes('up') + relay.bytes('down');
      const same = now === last;
      last = now;
      return same;
    },
    { intervalMs: 150 },
  );
}
