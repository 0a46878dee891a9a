/**
 * Child process for the two-process tests: a transfer agent over one region whose block b
 * is filled with a pattern derived from (seed, b). It prints its metadata as one JSON line,
 * then obeys stdin commands: `crc FIRST COUNT` (prints the CRC of those blocks),
 * `die-after CHUNKS` (SIGKILLs itself after sending that many data chunks), `impl` (prints
 * which shm ring it uses), `exit`. PEER_RING_BYTES sets the size of its shm staging rings.
 */
import { createInterface } from 'node:readline';
import { crc32 } from 'node:zlib';
import { InThreadTransferAgent, shmRingImplementation } from '../../src/transfer/index.ts';
import { allocateShared } from '../../src/util/shared-memory.ts';
import { fillPattern } from './pattern.ts';

const [backend = 'TCP', numBlocksArg = '64', blockBytesArg = '4096', seedArg = '1'] = process.argv.slice(2);
const numBlocks = Number(numBlocksArg);
const blockBytes = Number(blockBytesArg);
const bytes = new Uint8Array(allocateShared(numBlocks * blockBytes));
fillPattern(bytes, blockBytes, Number(seedArg));

let dieAfter = Number.POSITIVE_INFINITY;
const agent = await InThreadTransferAgent.create(
  {
    engineId: 'child',
    backends: [backend],
    chunkBytes: 256 << 10,
    ...(process.env['PEER_RING_BYTES'] ? { ringBytes: Number(process.env['PEER_RING_BYTES']) } : {}),
  },
  {
    outgoing: (view) => {
      if (--dieAfter <= 0) process.kill(process.pid, 'SIGKILL');
      return view;
    },
  },
);
agent.registerMemory([{ id: 0, bytes, blockBytes, numBlocks }]);
const all = Array.from({ length: numBlocks }, (_, i) => i);
agent.grantRead('all', { blockIds: all, peer: 'parent' });
agent.grantWrite('all', { blockIds: all, peer: 'parent' });
process.stdout.write(`${JSON.stringify(agent.metadata())}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, a = '0', b = '0'] = line.trim().split(/\s+/);
  if (cmd === 'crc') {
    const first = Number(a) * blockBytes;
    process.stdout.write(`${crc32(bytes.subarray(first, first + Number(b) * blockBytes))}\n`);
  } else if (cmd === 'die-after') {
    dieAfter = Number(a);
    process.stdout.write('ok\n');
  } else if (cmd === 'impl') {
    process.stdout.write(`${JSON.stringify(shmRingImplementation())}\n`);
  } else if (cmd === 'exit') {
    break;
  }
}
await agent.close();
process.exit(0);
