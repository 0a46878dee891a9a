/**
 * A MoRIIO producer engine in its own process (two-process tests). argv[2] is the engine
 * options as JSON. Prints READY, then runs one request per stdin line
 * ({prompt, requestId, kvTransferParams}) and prints DONE <kv_transfer_params JSON>.
 */
import { createInterface } from 'node:readline';
import { LLM, type LLMOptions } from '../../../src/engine/llm.ts';

const options = JSON.parse(process.argv[2] ?? '{}') as LLMOptions;
const llm = await LLM.create(options);
process.stdout.write('READY\n');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const job = JSON.parse(line) as {
    prompt: string;
    requestId: string;
    kvTransferParams: Record<string, unknown>;
  };
  const [out] = await llm.generate(
    [job.prompt],
    { maxTokens: 1, temperature: 0, ignoreEos: true },
    {
      requestIdPrefix: job.requestId,
      kvTransferParams: job.kvTransferParams,
    },
  );
  process.stdout.write(`DONE ${JSON.stringify(out?.kvTransferParams ?? null)}\n`);
}
await llm.shutdown();
