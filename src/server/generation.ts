/**
 * Fans one HTTP request out into engine requests (prompts × n choices) and merges their
 * delta streams in arrival order. Aborting `signal` (client gone) aborts every choice.
 */
import type { AsyncEngineLike, GenerateRequest, RequestOutputDelta } from '../engine/api.ts';
import type { GenerationPlan } from './parse-request.ts';
import { internalRequestId } from './request-id.ts';

export interface ChoiceEvent {
  /** OpenAI choice index: promptIndex * n + choice. */
  index: number;
  promptIndex: number;
  delta: RequestOutputDelta;
}

/** Per-choice seeds derived deterministically: choice i of a seeded request uses seed + i. */
export function choiceSeed(seed: number | null, choice: number): number | null {
  return seed === null ? null : seed + choice;
}

export function buildEngineRequests(
  plan: GenerationPlan,
  baseId: string,
  disableRandomization: boolean,
): GenerateRequest[] {
  const total = plan.prompts.length * plan.n;
  const out: GenerateRequest[] = [];
  for (const [p, prompt] of plan.prompts.entries()) {
    const sampling = plan.sampling[p]!;
    for (let i = 0; i < plan.n; i++) {
      const index = p * plan.n + i;
      out.push({
        requestId: internalRequestId(total > 1 ? `${baseId}-${index}` : baseId, disableRandomization),
        promptTokenIds: prompt,
        sampling: { ...sampling, seed: choiceSeed(sampling.seed, i) },
        kvTransferParams: plan.kvTransferParams,
        ...(plan.cacheSalt === undefined ? {} : { cacheSalt: plan.cacheSalt }),
      });
    }
  }
  return out;
}

export async function* runChoices(
  engine: AsyncEngineLike,
  requests: readonly GenerateRequest[],
  n: number,
  signal: AbortSignal,
): AsyncGenerator<ChoiceEvent> {
  const queue: ChoiceEvent[] = [];
  let wake: (() => void) | null = null;
  let remaining = requests.length;
  const failure: { error?: unknown; failed: boolean } = { failed: false };
  const notify = (): void => {
    wake?.();
    wake = null;
  };

  for (const [index, request] of requests.entries()) {
    void (async () => {
      try {
        for await (const delta of engine.generate(request, signal)) {
          queue.push({ index, promptIndex: Math.floor(index / n), delta });
          notify();
        }
      } catch (error) {
        if (!failure.failed) Object.assign(failure, { error, failed: true });
      } finally {
        remaining--;
        notify();
      }
    })();
  }

  try {
    while (true) {
      if (failure.failed) throw failure.error;
      const next = queue.shift();
      if (next) {
        yield next;
        continue;
      }
      if (remaining === 0) return;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  } finally {
    // Stopped early (a choice failed, or the consumer left): abort the choices still live.
    if (remaining > 0) {
      for (const r of requests) engine.abort(r.requestId);
    }
  }
}
