/**
 * vLLM's add_lora as the server calls it before it serves an adapter: the adapter must load
 * into this engine's model (its shapes, targets, rank ≤ max_lora_rank). Without weights
 * (emulation: `--mode random|echo`) adapters are names only and nothing is read.
 */
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/index.ts';
import { modelDims } from '../model/dims.ts';
import { loadModelConfig } from '../model/load.ts';
import type { LoRARequest } from './lora-request.ts';
import { readPeftAdapter } from './peft-adapter.ts';

export function checkLoraAdapter(config: EngineConfig, request: LoRARequest): void {
  if (!config.lora) {
    throw new KVError('LORA_CONFIG_INVALID', 'LoRA is not enabled', {
      field: 'enable_lora',
      hint: 'Start the server with --enable-lora to serve LoRA adapters.',
    });
  }
  if ((config.emulation?.mode ?? 'model') !== 'model') return;
  readPeftAdapter(
    request.loraPath,
    request.loraName,
    modelDims(loadModelConfig(config.model.model)),
    config.lora.maxLoraRank,
  );
}
