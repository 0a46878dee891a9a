/**
 * Child of nixl-kill.test.ts: a decode engine (kv_consumer, tcp, max_num_seqs 1) that keeps
 * one long local request running, so a remote-prefill request it receives on stdin (JSON
 * `{prompt, params, leaseSeconds}`) stays queued: it heartbeats P but never reads. Prints
 * "ready" once built and "queued" once the remote request was added. The parent kills it.
 */
import { createInterface } from 'node:readline';
import { LLM } from '../../../src/engine/llm.ts';
import { GREEDY } from '../nixl-helpers.ts';

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const leaseSeconds = Number(process.argv[2] ?? '1');
const d = await LLM.create({
  model: 'tiny',
  num_gpu_blocks: 300,
  max_model_len: 4096,
  max_num_seqs: 1,
  kvTransferConfig: {
    kv_connector: 'NixlConnector',
    kv_role: 'kv_consumer',
    engine_id: 'kill-decode',
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0, kv_lease_duration: leaseSeconds },
  },
});
process.stdout.write('ready\n');
const first = await lines.next();
if (first.done) process.exit(0);
const { prompt, params } = JSON.parse(first.value as string) as {
  prompt: string;
  params: Record<string, unknown>;
};
// ~4000 decode steps: several seconds even with the native matmul, longer than the test waits.
const busy = d.generate('keep the only slot busy', { ...GREEDY, maxTokens: 4000 });
const remote = d.generate(prompt, GREEDY, { kvTransferParams: params });
process.stdout.write('queued\n');
await Promise.race([Promise.all([busy, remote]), lines.next()]);
await d.shutdown();
process.exit(0);
