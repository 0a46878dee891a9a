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

/**
 * A remote prefill (`do_remote_prefill`) is one hand-off: the peer holds one request's
 * blocks and frees them when the first reader reports it is done. With n > 1 only choice 0
 * of a prompt loads them; the other choices start once it produced its first token, and
 * find the prompt in the local prefix cache (or recompute it if it is not there).
 */
function sharesOneHandOff(plan: GenerationPlan): boolean {
  return plan.n > 1 && plan.kvTransferParams?.['do_remote_prefill'] === true;
}

export interface EngineRequests {
  requests: GenerateRequest[];
  /** Per request: the index of the request whose first output it waits for, or null. */
  startAfter: (number | null)[];
}

export function buildEngineRequests(
  plan: GenerationPlan,
  baseId: string,
  disableRandomization: boolean,
): EngineRequests {
  const total = plan.prompts.length * plan.n;
  const requests: GenerateRequest[] = [];
  const startAfter: (number | null)[] = [];
  const oneHandOff = sharesOneHandOff(plan);
  for (const [p, prompt] of plan.prompts.entries()) {
    const sampling = plan.sampling[p]!;
    for (let i = 0; i < plan.n; i++) {
      const index = p * plan.n + i;
      const follower = oneHandOff && i > 0;
      requests.push({
        requestId: internalRequestId(total > 1 ? `${baseId}-${index}` : baseId, disableRandomization),
        promptTokenIds: prompt,
        sampling: { ...sampling, seed: choiceSeed(sampling.seed, i) },
        kvTransferParams: follower ? null : plan.kvTransferParams,
        ...(plan.cacheSalt === undefined ? {} : { cacheSalt: plan.cacheSalt }),
      });
      startAfter.push(follower ? p * plan.n : null);
    }
  }
  return { requests, startAfter };
}

export async function* runChoices(
  engine: AsyncEngineLike,
  { requests, startAfter }: EngineRequests,
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

  // A leader's first output (or its end) releases the choices that wait for it.
  const started = requests.map(() => {
    let release!: () => void;
    const promise = new Promise<void>((resolve) => {
      release = resolve;
    });
    return { promise, release };
  });
  for (const [index, request] of requests.entries()) {
    void (async () => {
      try {
        const leader = startAfter[index] ?? null;
        if (leader !== null) await started[leader]!.promise;
        if (signal.aborted || failure.failed) return;
        for await (const delta of engine.generate(request, signal)) {
          started[index]!.release();
          queue.push({ index, promptIndex: Math.floor(index / n), delta });
          notify();
        }
      } catch (error) {
        if (!failure.failed) Object.assign(failure, { error, failed: true });
      } finally {
        started[index]!.release();
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
