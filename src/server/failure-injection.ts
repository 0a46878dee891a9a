/**
 * llm-d-inference-sim's failure injection: with `--failure-injection-rate N`, N% of generation
 * requests are answered at once with one of the configured failure types (drawn uniformly),
 * before the request is validated or reaches the engine, as the sim does. Each type has the
 * status and OpenAI error body a client of vLLM meets for that failure (`code` the HTTP
 * status, `type` its OpenAI class); `kvconnect_code` (SERVER_INJECTED_*) tells a test the
 * failure was injected. The draws come from a seeded generator, so a run is reproducible.
 */
import type { FailureInjectionConfig, FailureType } from '../config/fault-injection.ts';
import { FAILURE_TYPES } from '../config/fault-injection.ts';
import type { ErrorCode } from '../errors/codes.ts';
import { KVError } from '../errors/kv-error.ts';
import { mulberry32 } from '../util/mulberry32.ts';

export interface FailureContext {
  servedModelName: string;
  maxModelLen: number;
}

const HINT =
  'Injected by --failure-injection-rate (llm-d-inference-sim semantics); set it to 0, or POST {"failure-injection-rate": 0} to /admin/config, to stop.';

const FAILURES: Record<
  FailureType,
  (c: FailureContext) => { code: ErrorCode; message: string; param?: string }
> = {
  rate_limit: (c) => ({
    code: 'SERVER_INJECTED_RATE_LIMIT',
    message: `Rate limit reached for ${c.servedModelName} on requests per min (RPM): Limit 3, Used 3, Requested 1.`,
  }),
  invalid_api_key: () => ({
    code: 'SERVER_INJECTED_INVALID_API_KEY',
    message: 'Incorrect API key provided.',
  }),
  context_length: (c) => ({
    code: 'SERVER_INJECTED_CONTEXT_LENGTH',
    message: `This model's maximum context length is ${c.maxModelLen} tokens. However, your request has ${c.maxModelLen + 1} input tokens. Please reduce the length of the input messages.`,
    param: 'messages',
  }),
  server_error: () => ({
    code: 'SERVER_INJECTED_SERVER_ERROR',
    message: 'The server is overloaded or not ready yet.',
  }),
  invalid_request: () => ({
    code: 'SERVER_INJECTED_INVALID_REQUEST',
    message: "Invalid request: missing required parameter 'model'.",
    param: 'model',
  }),
  model_not_found: (c) => ({
    code: 'SERVER_INJECTED_MODEL_NOT_FOUND',
    message: `The model \`${c.servedModelName}-nonexistent\` does not exist.`,
    param: 'model',
  }),
};

/** The error a request meets for an injected failure of type `type`. */
export function injectedFailure(type: FailureType, ctx: FailureContext): KVError {
  const f = FAILURES[type](ctx);
  return new KVError(f.code, f.message, {
    hint: HINT,
    ...(f.param ? { field: f.param } : {}),
    details: { failure_type: type },
  });
}

export class FailureInjector {
  #config: FailureInjectionConfig;
  readonly #random: () => number;
  readonly #ctx: FailureContext;

  constructor(config: FailureInjectionConfig, ctx: FailureContext, seed = 0) {
    this.#config = config;
    this.#ctx = ctx;
    this.#random = mulberry32(seed ^ 0x5eed_fa11);
  }

  get config(): FailureInjectionConfig {
    return this.#config;
  }

  set config(c: FailureInjectionConfig) {
    this.#config = c;
  }

  /** The failure this request gets, or null (the sim's draw: an integer 1..100 <= rate). */
  draw(): KVError | null {
    const { rate, types } = this.#config;
    if (rate === 0) return null;
    if (Math.floor(this.#random() * 100) + 1 > rate) return null;
    const pool: readonly FailureType[] = types.length > 0 ? types : FAILURE_TYPES;
    const type = pool[Math.floor(this.#random() * pool.length)] as FailureType;
    return injectedFailure(type, this.#ctx);
  }
}
