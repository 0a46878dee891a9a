/**
 * Runs the transfer-agent conformance suite (conformance.ts) over every agent variant and
 * data path: {in-thread, threaded} × {tcp, shm from the peer's mapped KV, shm through the ring}.
 */
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentVariant, transferAgentConformance } from './helpers/conformance.ts';
import { assertNoRingsLeftBehind } from './helpers/shm-files.ts';

setLogLevel('silent');

const VARIANTS: AgentVariant[] = [false, true].flatMap((thread) => {
  const where = thread ? 'threaded' : 'in-thread';
  return [
    { name: `${where}, tcp`, thread, backend: 'TCP', kvMapping: false },
    { name: `${where}, shm from mapped KV memory`, thread, backend: 'SHM', kvMapping: true },
    { name: `${where}, shm through the staging ring`, thread, backend: 'SHM', kvMapping: false },
  ] as const;
});

assertNoRingsLeftBehind();

for (const variant of VARIANTS) transferAgentConformance(variant);
