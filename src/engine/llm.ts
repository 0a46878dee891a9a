/**
 * The offline API: `new LLM({ model, kvTransferConfig, ...engine options })` and
 * `await llm.generate(prompts, samplingParams)`. Built on AsyncEngine, so KV hand-offs of
 * finished requests keep progressing in the background between generate() calls.
 */
import { randomUUID } from 'node:crypto';
import type { EngineOptionsInput } from '../config/engine-config.ts';
import type { KVTransferParams } from '../connector/types.ts';
import type { FinishReason, RequestMetrics, RequestOutputDelta, SamplingParams } from './api.ts';
import { AsyncEngine } from './async-engine.ts';
import type { LoRARequest } from './lora/lora-request.ts';
import { samplingParams } from './sampling-params.ts';

export { DEFAULT_SAMPLING_PARAMS, samplingParams } from './sampling-params.ts';

export type LLMOptions = EngineOptionsInput & {
  /** Same as kv_transfer_config (camelCase alias). */
  kvTransferConfig?: EngineOptionsInput['kv_transfer_config'];
};

export type PromptInput = string | { prompt: string } | { promptTokenIds: number[] };

export interface GenerateOptions {
  /** Per prompt (array) or for all prompts. */
  kvTransferParams?: KVTransferParams | (KVTransferParams | null)[] | null;
  requestIdPrefix?: string;
  /** The LoRA adapter per prompt (array) or for all prompts (vLLM's lora_request). */
  loraRequest?: LoRARequest | (LoRARequest | null)[] | null;
}

export interface RequestOutput {
  requestId: string;
  prompt: string | null;
  text: string;
  tokenIds: number[];
  finishReason: FinishReason | null;
  /** Logprob of each generated token, when requested. */
  logprobs: number[] | null;
  kvTransferParams: KVTransferParams | null;
  metrics: RequestMetrics;
  error?: { code: string; message: string; hint?: string };
}

export class LLM {
  readonly #ready: Promise<AsyncEngine>;

  /** Starts loading at once; generate() waits for it. Use LLM.create() to surface start-up errors early. */
  constructor(options: LLMOptions = {}) {
    const { kvTransferConfig, ...rest } = options;
    const engineOptions: EngineOptionsInput =
      kvTransferConfig === undefined ? rest : { ...rest, kv_transfer_config: kvTransferConfig };
    this.#ready = AsyncEngine.create(engineOptions);
    this.#ready.catch(() => {}); // reported by the first call that awaits it
  }

  static async create(options: LLMOptions = {}): Promise<LLM> {
    const llm = new LLM(options);
    await llm.#ready;
    return llm;
  }

  /** The underlying engine (stats, the scheduler, the connector). */
  engine(): Promise<AsyncEngine> {
    return this.#ready;
  }

  async generate(
    prompts: PromptInput | PromptInput[],
    params: Partial<SamplingParams> | Partial<SamplingParams>[] = {},
    options: GenerateOptions = {},
  ): Promise<RequestOutput[]> {
    const engine = await this.#ready;
    const list = Array.isArray(prompts) ? prompts : [prompts];
    const prefix = options.requestIdPrefix ?? randomUUID().slice(0, 8);
    const runs = list.map((p, i) => {
      const sampling = samplingParams(Array.isArray(params) ? params[i] : params);
      const kv = options.kvTransferParams;
      const kvTransferParams = Array.isArray(kv) ? (kv[i] ?? null) : (kv ?? null);
      const lora = options.loraRequest;
      const loraRequest = Array.isArray(lora) ? (lora[i] ?? null) : (lora ?? null);
      const requestId = `${prefix}-${i}`;
      const prompt = typeof p === 'string' ? p : 'prompt' in p ? p.prompt : null;
      const stream = engine.generate({
        requestId,
        ...(prompt !== null
          ? { prompt }
          : { promptTokenIds: (p as { promptTokenIds: number[] }).promptTokenIds }),
        sampling,
        kvTransferParams,
        loraRequest,
      });
      return collect(requestId, prompt, stream);
    });
    return Promise.all(runs);
  }

  /** Resolves once no request is live and no KV hand-off holds blocks. */
  async waitIdle(): Promise<void> {
    await (await this.#ready).waitIdle();
  }

  async shutdown(): Promise<void> {
    const engine = await this.#ready.catch(() => null);
    await engine?.shutdown();
  }
}

async function collect(
  requestId: string,
  prompt: string | null,
  stream: AsyncIterable<RequestOutputDelta>,
): Promise<RequestOutput> {
  const out: RequestOutput = {
    requestId,
    prompt,
    text: '',
    tokenIds: [],
    finishReason: null,
    logprobs: null,
    kvTransferParams: null,
    metrics: null as unknown as RequestMetrics,
  };
  for await (const delta of stream) {
    out.text += delta.newText;
    out.tokenIds.push(...delta.newTokenIds);
    if (delta.logprobs) out.logprobs = [...(out.logprobs ?? []), ...delta.logprobs];
    out.metrics = delta.metrics;
    if (delta.finished) {
      out.finishReason = delta.finishReason;
      out.kvTransferParams = delta.kvTransferParams;
      if (delta.error) out.error = delta.error;
    }
  }
  return out;
}
