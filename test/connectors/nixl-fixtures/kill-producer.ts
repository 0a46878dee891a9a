/**
 * Child of nixl-kill.test.ts: a prefill engine (kv_producer, tcp) that prefills the prompts
 * in argv[2] (JSON) and prints their kv_transfer_params as one JSON line. When it starts
 * serving the first READ it prints "serving" and freezes (the event loop blocks, the data is
 * never written) so the parent can SIGKILL it mid-transfer. Ends on 'exit' or stdin EOF.
 */
import { writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { LLM } from '../../../src/engine/llm.ts';
import { agentFaults, withFaultConnectors } from '../fault-connectors.ts';
import { engineOptions, GREEDY, P_PARAMS } from '../nixl-helpers.ts';

const prompts = JSON.parse(process.argv[2] ?? '[]') as string[];
let frozen = false;
agentFaults.outgoing = (view) => {
  if (!frozen) {
    frozen = true;
    writeSync(1, 'serving\n');
    // Bounded so an orphaned child still ends (then stdin EOF exits it).
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20_000);
  }
  return view;
};
const p = await LLM.create(
  withFaultConnectors(
    engineOptions(
      { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' },
      'kv_producer',
      'kill-prefill',
    ),
  ),
);
const outs = await p.generate(prompts, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
process.stdout.write(`${JSON.stringify(outs.map((o) => o.kvTransferParams))}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'exit') break;
}
await p.shutdown();
process.exit(0);
