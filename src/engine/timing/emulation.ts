/**
 * What an engine emulating a deployment is built with (docs/emulation.md): its clock, the
 * step-time model the engine loop consults after every step, and — in `random` / `echo`
 * mode — the model-free token source. Everything else (scheduler, KV cache, connectors,
 * events, server) runs unchanged and reads the engine's clock.
 */
import type { EmulationConfig } from '../../config/emulation-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { TokenizerLike } from '../api.ts';
import type { Request } from '../request.ts';
import { RANDOM_MODE_TEXT, SyntheticTokens } from '../runner/synthetic-tokens.ts';
import { EngineClock } from './engine-clock.ts';
import { RooflineModel } from './roofline.ts';
import { SimLatencyModel } from './sim-latency.ts';
import type { StepTimeModel } from './step-batch.ts';

export function createStepTimeModel(emulation: EmulationConfig | null | undefined): StepTimeModel | null {
  if (!emulation || emulation.latencyCalculator === null) return null;
  if (emulation.latencyCalculator === 'roofline') {
    if (!emulation.roofline) throw new Error('roofline calculator without a target');
    return RooflineModel.fromTarget(emulation.roofline);
  }
  return new SimLatencyModel(emulation.latencyCalculator, emulation.sim, emulation.seed);
}

export function createEngineClock(emulation: EmulationConfig | null | undefined): EngineClock {
  return new EngineClock(emulation?.speedup ?? 1);
}

/**
 * In random / echo mode: the token of a request's next output position. Null in model mode.
 * The modes have no worker-side connector, so they refuse a KV transfer config.
 */
export function syntheticTokenSource(
  config: EngineConfig & { emulation?: EmulationConfig | null },
  tokenizer: TokenizerLike,
  lookup: (reqId: string) => Request | undefined,
): ((reqId: string) => number) | null {
  const mode = config.emulation?.mode ?? 'model';
  if (mode === 'model') return null;
  if (config.kvTransferConfig) {
    throw new KVError(
      'KV_CONFIG_INVALID',
      `Invalid value for mode: expected model when a KV connector is set, received ${JSON.stringify(mode)}`,
      {
        field: 'mode',
        hint: '--mode random|echo computes no KV and runs no worker-side connector; drop --kv-transfer-config or use --mode model.',
      },
    );
  }
  const tokens = new SyntheticTokens(
    mode,
    tokenizer.encode(RANDOM_MODE_TEXT),
    tokenizer.eosTokenId,
    config.model.seed,
  );
  return (reqId) => {
    const req = lookup(reqId);
    if (!req) return tokenizer.eosTokenId ?? 0;
    return tokens.next(req);
  };
}
