/**
 * Runs the transfer-agent conformance suite (conformance.ts) over every agent variant and
 * data path: {in-thread, threaded} × {tcp, shm from the peer's mapped KV, shm through the ring}.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentVariant, transferAgentConformance } from './conformance.ts';

setLogLevel('silent');

const VARIANTS: AgentVariant[] = [false, true].flatMap((thread) => {
  const where = thread ? 'threaded' : 'in-thread';
  return [
    { name: `${where}, tcp`, thread, backend: 'TCP', kvMapping: false },
    { name: `${where}, shm from mapped KV memory`, thread, backend: 'SHM', kvMapping: true },
    { name: `${where}, shm through the staging ring`, thread, backend: 'SHM', kvMapping: false },
  ] as const;
});

const shmFiles = () => readdirSync('/dev/shm').filter((f) => f.startsWith('kvconnect-')).length;
const shmFilesBefore = shmFiles();
after(() => assert.equal(shmFiles(), shmFilesBefore, 'shm staging files must not be left behind'));

for (const variant of VARIANTS) transferAgentConformance(variant);
