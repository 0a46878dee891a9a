/**
 * Child process for test/transfer/direct-read-process.test.ts: a same-host (SHM) transfer
 * agent over one region in mappable KV memory, where every 4-byte word of block b in
 * generation g holds (g << 16) | b. It prints its metadata, then obeys stdin commands:
 * `grant KEY FIRST COUNT` (a READ grant; prints "ok"), `revoke KEY` (prints "ok"), `churn MS` (for MS ms, again and again:
 * revoke grant 'c', write the next generation into every block, grant 'c' over every block;
 * prints the last generation), `exit`.
 */
import { createInterface } from 'node:readline';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { InThreadTransferAgent } from '../../src/transfer/index.ts';
import { allocateShared } from '../../src/util/shared-memory.ts';

const numBlocks = Number(process.argv[2] ?? '16');
const blockBytes = Number(process.argv[3] ?? '65536');
const bytes = new Uint8Array(allocateShared(numBlocks * blockBytes));
const words = new Uint32Array(bytes.buffer, 0, bytes.length / 4);
const perBlock = blockBytes / 4;
let generation = 0;

function fill(g: number): void {
  for (let b = 0; b < numBlocks; b++) words.fill(((g << 16) | b) >>> 0, b * perBlock, (b + 1) * perBlock);
}

fill(generation);
const agent = await InThreadTransferAgent.create({ engineId: 'owner', backends: ['SHM'] });
agent.registerMemory([{ id: 0, bytes, blockBytes, numBlocks }]);
const all = Array.from({ length: numBlocks }, (_, i) => i);
process.stdout.write(`${JSON.stringify(agent.metadata())}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, a = '', b = '0', c = '0'] = line.trim().split(/\s+/);
  if (cmd === 'grant') {
    agent.grantRead(a, { blockIds: Array.from({ length: Number(c) }, (_, i) => Number(b) + i) });
    process.stdout.write('ok\n');
  } else if (cmd === 'revoke') {
    agent.revokeGrant(a);
    process.stdout.write('ok\n');
  } else if (cmd === 'churn') {
    const end = performance.now() + Number(a);
    while (performance.now() < end) {
      agent.revokeGrant('c');
      fill(++generation);
      agent.grantRead('c', { blockIds: all });
      await yieldToLoop();
    }
    process.stdout.write(`${generation}\n`);
  } else if (cmd === 'exit') {
    break;
  }
}
await agent.close();
process.exit(0);
