/**
 * What an engine emulating a deployment is built with (docs/emulation.md): its clock, the
 * step-time model the engine loop consults after every step, and — in `random` / `echo`
 * mode — the model-free token source. Everything else (scheduler, KV cache, connectors,
 * events, server) runs unchanged and reads the engine's clock.
 */
import { configError } from '../../config/config-error.ts';
import type { EmulationConfig, TargetKv } from '../../config/emulation-config.ts';
import type { HFModelConfig } from '../../config/model-presets.ts';
import { resolveTargetModel } from '../../config/target-deployment.ts';
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
 * The KV geometry of the target model (model-free modes with --target-model): its layers,
 * KV heads and head_dim (divided by --kv-bytes-scale), full attention, on top of the served
 * model's config (tokenizer-related fields stay). The cache dtype is BF16.
 */
export function targetKvModelConfig(target: TargetKv, base: HFModelConfig): HFModelConfig {
  const shape = resolveTargetModel(target.model);
  if (shape.headDim % target.bytesScale !== 0) {
    throw configError(
      'kv-bytes-scale',
      `a divisor of the target's head_dim (${shape.headDim})`,
      target.bytesScale,
      'Pass --kv-bytes-scale 1, 2, 4, 8, 16, ... up to the head_dim.',
    );
  }
  const { layer_types: _types, sliding_window: _window, use_sliding_window: _use, ...rest } = base;
  return {
    ...rest,
    num_hidden_layers: shape.numLayers,
    num_attention_heads: shape.numHeads,
    num_key_value_heads: shape.numKvHeads,
    head_dim: shape.headDim / target.bytesScale,
    hidden_size: shape.hiddenSize,
    intermediate_size: shape.intermediateSize,
  };
}

/** The engine config with the target's KV dtype (BF16) and the target's geometry checks. */
export function withTargetKv<C extends EngineConfig>(config: C): C {
  if (config.parallel.tensorParallelSize !== 1) {
    throw configError(
      'tensor_parallel_size',
      '1 with --mode random|echo and --target-model (the emulated target has its own --target-tp)',
      config.parallel.tensorParallelSize,
      'Drop --tensor-parallel-size.',
    );
  }
  return { ...config, cache: { ...config.cache, cacheDtype: 'bfloat16' } };
}

/**
 * In random / echo mode: the token of a request's next output position. Null in model mode.
 * Without a target model these modes run no worker side, so they refuse a KV transfer config.
 */
export function syntheticTokenSource(
  config: EngineConfig & { emulation?: EmulationConfig | null },
  tokenizer: TokenizerLike,
  lookup: (reqId: string) => Request | undefined,
): ((reqId: string) => number) | null {
  const mode = config.emulation?.mode ?? 'model';
  if (mode === 'model') return null;
  if (config.kvTransferConfig && !config.emulation?.targetKv) {
    throw new KVError(
      'KV_CONFIG_INVALID',
      `Invalid value for mode: expected model when a KV connector is set, received ${JSON.stringify(mode)}`,
      {
        field: 'mode',
        hint: '--mode random|echo without --target-model computes no KV; add --target-model (KV at its size), drop --kv-transfer-config or use --mode model.',
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
