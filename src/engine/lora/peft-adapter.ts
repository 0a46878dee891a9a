/**
 * A LoRA adapter in PEFT's layout: `adapter_config.json` (r, lora_alpha, target_modules,
 * use_rslora, ...) and `adapter_model.safetensors` with
 * `base_model.model.model.layers.<l>.<self_attn|mlp>.<proj>.lora_A.weight` [r, in] and
 * `...lora_B.weight` [out, r]. Read, checked against the model's shapes and vLLM's rules
 * (no DoRA, no modules_to_save, no bias, rank ≤ max_lora_rank), with vLLM's scaling:
 * lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { KVError } from '../../errors/index.ts';
import type { ModelDims } from '../model/dims.ts';
import { indexSafetensorsFile, tensorToFloat32 } from '../model/safetensors.ts';

export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';

/** The projections vLLM applies LoRA to in Llama-family models, by PEFT module name. */
export const LORA_TARGETS = [
  'q_proj',
  'k_proj',
  'v_proj',
  'o_proj',
  'gate_proj',
  'up_proj',
  'down_proj',
] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

export interface LoraPair {
  /** [r, inDim], row-major (PEFT's lora_A.weight). */
  a: Float32Array;
  /** [outDim, r], row-major (PEFT's lora_B.weight). */
  b: Float32Array;
  inDim: number;
  outDim: number;
}

export interface PeftAdapter {
  directory: string;
  rank: number;
  loraAlpha: number;
  useRslora: boolean;
  /** vLLM's vllm_lora_scaling_factor. */
  scaling: number;
  baseModelName: string | null;
  /** Per layer: target → weights (absent targets are not adapted in that layer). */
  layers: Map<LoraTarget, LoraPair>[];
}

/** vLLM's LoRAAdapterNotFoundError text. */
export function adapterNotFoundMessage(name: string, path: string): string {
  return `Loading lora ${name} failed: No adapter found for ${path}`;
}

function invalid(directory: string, message: string, hint: string): KVError {
  return new KVError('LORA_ADAPTER_INVALID', message, { hint, details: { directory } });
}

/** The parsed adapter_config.json, validated as vLLM's PEFTHelper does. */
export interface PeftConfig {
  r: number;
  loraAlpha: number;
  useRslora: boolean;
  targetModules: string[];
  baseModelName: string | null;
}

export function readPeftConfig(directory: string, name: string, maxLoraRank?: number): PeftConfig {
  const file = join(directory, ADAPTER_CONFIG_FILE);
  if (!existsSync(file) || !existsSync(join(directory, ADAPTER_WEIGHTS_FILE))) {
    throw new KVError('LORA_ADAPTER_NOT_FOUND', adapterNotFoundMessage(name, directory), {
      hint: `A PEFT adapter directory holds ${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE}.`,
      details: { directory },
    });
  }
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw invalid(
      directory,
      `${file} is not valid JSON: ${(cause as Error).message}`,
      'Re-save the adapter.',
    );
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
    throw invalid(directory, `${file} is not a JSON object`, 'Re-save the adapter.');
  const missing = ['r', 'lora_alpha', 'target_modules'].filter((k) => !(k in raw));
  if (missing.length > 0) {
    throw invalid(
      directory,
      `Missing required configuration fields: {${missing.map((k) => `'${k}'`).join(', ')}}`,
      `${file} needs r, lora_alpha and target_modules (PEFT's LoraConfig).`,
    );
  }
  const r = raw.r;
  const alpha = raw.lora_alpha;
  if (typeof r !== 'number' || !Number.isSafeInteger(r) || r < 1)
    throw invalid(directory, `${file}: r must be a positive integer, got ${JSON.stringify(r)}`, 'Fix r.');
  if (typeof alpha !== 'number' || !Number.isFinite(alpha))
    throw invalid(
      directory,
      `${file}: lora_alpha must be a number, got ${JSON.stringify(alpha)}`,
      'Fix lora_alpha.',
    );
  const problems: string[] = [];
  const mts = raw.modules_to_save;
  if (Array.isArray(mts) ? mts.length > 0 : mts !== undefined && mts !== null)
    problems.push('vLLM only supports modules_to_save being None.');
  if (raw.use_dora === true) problems.push('vLLM does not yet support DoRA.');
  if (problems.length > 0)
    throw invalid(
      directory,
      problems.join(', '),
      'Train the adapter with plain LoRA (no DoRA, no modules_to_save).',
    );
  if (raw.bias !== undefined && raw.bias !== 'none') {
    throw invalid(
      directory,
      'Adapter bias cannot be used without bias_enabled.',
      'kvconnect applies adapters without biases: train with bias="none".',
    );
  }
  if (maxLoraRank !== undefined && r > maxLoraRank) {
    throw new KVError('LORA_RANK_TOO_LARGE', `LoRA rank ${r} is greater than max_lora_rank ${maxLoraRank}.`, {
      hint: `Start the server with --max-lora-rank ${r} or larger.`,
      details: { directory },
    });
  }
  const tm = raw.target_modules;
  const targetModules = typeof tm === 'string' ? [tm] : Array.isArray(tm) ? tm.map(String) : [];
  const base = raw.base_model_name_or_path;
  return {
    r,
    loraAlpha: alpha,
    useRslora: raw.use_rslora === true,
    targetModules,
    baseModelName: typeof base === 'string' ? base : null,
  };
}

export function loraScaling(config: Pick<PeftConfig, 'r' | 'loraAlpha' | 'useRslora'>): number {
  return config.useRslora ? config.loraAlpha / Math.sqrt(config.r) : config.loraAlpha / config.r;
}

const NAME = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([a-z_]+)\.lora_([AB])\.weight$/;

function targetShape(dims: ModelDims, target: LoraTarget): { inDim: number; outDim: number } {
  const q = dims.numHeads * dims.headDim;
  const kv = dims.numKvHeads * dims.headDim;
  const h = dims.hiddenSize;
  const inter = dims.intermediateSize;
  switch (target) {
    case 'q_proj':
      return { inDim: h, outDim: q };
    case 'k_proj':
    case 'v_proj':
      return { inDim: h, outDim: kv };
    case 'o_proj':
      return { inDim: q, outDim: h };
    case 'gate_proj':
    case 'up_proj':
      return { inDim: h, outDim: inter };
    case 'down_proj':
      return { inDim: inter, outDim: h };
  }
}

/** Reads and checks a PEFT adapter for a model of these dimensions. */
export function readPeftAdapter(
  directory: string,
  name: string,
  dims: ModelDims,
  maxLoraRank?: number,
): PeftAdapter {
  const config = readPeftConfig(directory, name, maxLoraRank);
  const index = indexSafetensorsFile(join(directory, ADAPTER_WEIGHTS_FILE));
  const layers = Array.from({ length: dims.numLayers }, () => new Map<LoraTarget, LoraPair>());
  const halves = new Map<string, { a?: Float32Array; b?: Float32Array }>();
  const unexpected = new Set<string>();
  for (const [tensorName, entry] of index) {
    const m = NAME.exec(tensorName);
    const target = m?.[3] as LoraTarget | undefined;
    if (m === null || target === undefined || !(LORA_TARGETS as readonly string[]).includes(target)) {
      unexpected.add(tensorName);
      continue;
    }
    const layer = Number(m[1]);
    if (layer >= dims.numLayers) {
      throw invalid(
        directory,
        `${tensorName}: layer ${layer} does not exist (the model has ${dims.numLayers} layers)`,
        'The adapter was trained for another base model.',
      );
    }
    const { inDim, outDim } = targetShape(dims, target);
    const want = m[4] === 'A' ? [config.r, inDim] : [outDim, config.r];
    if (entry.shape.length !== 2 || entry.shape[0] !== want[0] || entry.shape[1] !== want[1]) {
      throw invalid(
        directory,
        `${tensorName} has shape [${entry.shape.join(', ')}], expected [${want.join(', ')}] (r=${config.r})`,
        'The adapter was trained for another base model, or its adapter_config.json r is wrong.',
      );
    }
    const key = `${layer}.${target}`;
    const half = halves.get(key) ?? {};
    half[m[4] === 'A' ? 'a' : 'b'] = tensorToFloat32(entry.read());
    halves.set(key, half);
  }
  if (unexpected.size > 0) {
    throw invalid(
      directory,
      `While loading ${directory}, expected target modules in [${LORA_TARGETS.map((t) => `'${t}'`).join(', ')}] but received [${[...unexpected].map((t) => `'${t}'`).join(', ')}]. Please verify that the loaded LoRA module is correct`,
      'Train the adapter on the attention (q/k/v/o) and MLP (gate/up/down) projections only.',
    );
  }
  for (const [key, half] of halves) {
    const [layer, target] = key.split('.') as [string, LoraTarget];
    if (half.a === undefined || half.b === undefined) {
      throw invalid(
        directory,
        `layer ${layer} ${target}: lora_A or lora_B is missing`,
        'Re-save the adapter.',
      );
    }
    (layers[Number(layer)] as Map<LoraTarget, LoraPair>).set(target, {
      a: half.a,
      b: half.b,
      ...targetShape(dims, target),
    });
  }
  return {
    directory,
    rank: config.r,
    loraAlpha: config.loraAlpha,
    useRslora: config.useRslora,
    scaling: loraScaling(config),
    baseModelName: config.baseModelName,
    layers,
  };
}
