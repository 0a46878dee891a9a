/**
 * Child process of the two-process NIXL tests: a prefill engine (kv_producer, backends UCX =
 * tcp or shm chosen per peer) that prefills the prompts given as JSON in argv[2] and prints
 * the kv_transfer_params as one JSON line. argv[4], optional, is kv_connector_extra_config
 * JSON merged over the defaults. Then it waits: 'usage' on stdin prints the KV cache usage,
 * 'exit' (or a kill) ends it.
 */
import { createInterface } from 'node:readline';
import { LLM } from '../../../src/engine/llm.ts';
import { engineOptions, GREEDY, P_PARAMS } from '../nixl-helpers.ts';

const prompts = JSON.parse(process.argv[2] ?? '[]') as string[];
const model = process.argv[3] ?? 'tiny';
const extra = JSON.parse(process.argv[4] ?? '{}') as Record<string, unknown>;
const p = await LLM.create(
  engineOptions(
    { model, connector: 'NixlConnector', backend: 'UCX' as 'TCP', extra },
    'kv_producer',
    'child-prefill',
  ),
);
const outs = await p.generate(prompts, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
process.stdout.write(`${JSON.stringify(outs.map((o) => o.kvTransferParams))}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === 'usage') {
    process.stdout.write(`${(await p.engine()).engine.schedulerStats().kvCacheUsage}\n`);
  }
  if (line.trim() === 'exit') break;
}
await p.shutdown();
process.exit(0);
