/**
 * llama.cpp in process, through node-llama-cpp's prebuilt CPU binary (the npm package
 * @node-llama-cpp/linux-x64 and its siblings): never built, never downloaded, no GPU. A
 * machine where that binary cannot load fails here with node-llama-cpp's reason.
 *
 * Token ids go in and come out (LlamaContextSequence.evaluate), so both engines are fed the
 * same prompt ids and compared id for id, never by text.
 */
import {
  getLlama,
  type Llama,
  type LlamaContext,
  LlamaLogLevel,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';

export type LlamaKvCacheType = 'f16' | 'f32';

export interface LlamaCppOptions {
  /** Threads of every evaluation (llama.cpp's `-t`). */
  threads: number;
  /** Prompt plus generated tokens the context must hold. */
  contextSize: number;
  /** The KV cache's element type (llama.cpp's default is f16). */
  kvCache: LlamaKvCacheType;
  /** Flash attention: llama.cpp's default is to use it where it can ('auto'). */
  flashAttention: 'auto' | boolean;
}

/** The llama.cpp binding: prebuilt binaries only, CPU only, warnings and errors logged. */
export async function loadLlamaCpp(threads: number): Promise<Llama> {
  return getLlama({
    build: 'never',
    usePrebuiltBinaries: true,
    skipDownload: true,
    gpu: false,
    maxThreads: threads,
    logLevel: LlamaLogLevel.error,
  });
}

/** One GGUF model with one single-sequence context. */
export class LlamaCppEngine {
  readonly #model: LlamaModel;
  readonly #context: LlamaContext;

  private constructor(model: LlamaModel, context: LlamaContext) {
    this.#model = model;
    this.#context = context;
  }

  static async open(llama: Llama, modelPath: string, o: LlamaCppOptions): Promise<LlamaCppEngine> {
    const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
    const kv = o.kvCache === 'f32' ? 'F32' : 'F16';
    const context = await model.createContext({
      contextSize: o.contextSize,
      batchSize: o.contextSize,
      sequences: 1,
      threads: { ideal: o.threads, min: o.threads },
      flashAttention: o.flashAttention,
      experimentalKvCacheKeyType: kv,
      experimentalKvCacheValueType: kv,
    });
    return new LlamaCppEngine(model, context);
  }

  /** llama.cpp's own tokenization of `text` (no BOS added). */
  tokenize(text: string): number[] {
    return this.#model.tokenize(text, false).map(Number);
  }

  /**
   * Greedy decoding from a fresh sequence: the prompt's ids, then `maxTokens` tokens. Times
   * are wall clock: prefill = until the first token is out, decode = the tokens after it.
   */
  async greedy(
    promptIds: readonly number[],
    maxTokens: number,
  ): Promise<{ tokens: number[]; prefillMs: number; decodeMs: number }> {
    const sequence = this.#context.getSequence();
    try {
      const tokens: number[] = [];
      const t0 = performance.now();
      let tFirst = t0;
      for await (const token of sequence.evaluate(promptIds as Token[], { temperature: 0 })) {
        tokens.push(Number(token));
        if (tokens.length === 1) tFirst = performance.now();
        if (tokens.length >= maxTokens) break;
      }
      const tEnd = performance.now();
      if (tokens.length < maxTokens) {
        throw new Error(`llama.cpp stopped after ${tokens.length} of ${maxTokens} tokens`);
      }
      return { tokens, prefillMs: tFirst - t0, decodeMs: tEnd - tFirst };
    } finally {
      sequence.dispose();
    }
  }

  async dispose(): Promise<void> {
    await this.#context.dispose();
    await this.#model.dispose();
  }
}
