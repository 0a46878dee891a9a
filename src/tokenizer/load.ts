/**
 * loadTokenizer: the byte tokenizer for built-in presets; for a checkpoint directory, its
 * `tokenizer.json` when present (else the byte tokenizer).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { getModelPreset } from '../config/model-presets.ts';
import { KVError } from '../errors/index.ts';
import { ByteTokenizer } from './byte-tokenizer.ts';
import { HFTokenizer } from './hf-tokenizer.ts';
import type { TokenizerLike } from './types.ts';

function readJson(file: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw new KVError('TOKENIZER_INVALID', `Cannot read ${file} as JSON`, {
      hint: 'Fix or re-download the tokenizer files next to the weights.',
      cause,
    });
  }
}

export function loadTokenizer(modelNameOrDir: string): TokenizerLike {
  if (getModelPreset(modelNameOrDir) !== undefined) return new ByteTokenizer();
  const file = join(modelNameOrDir, 'tokenizer.json');
  if (!existsSync(file)) return new ByteTokenizer();
  const configFile = join(modelNameOrDir, 'tokenizer_config.json');
  const modelConfigFile = join(modelNameOrDir, 'config.json');
  const modelConfig = existsSync(modelConfigFile) ? readJson(modelConfigFile) : {};
  const num = (v: unknown): number | null =>
    typeof v === 'number' ? v : Array.isArray(v) && typeof v[0] === 'number' ? v[0] : null;
  try {
    return new HFTokenizer(readJson(file), {
      tokenizerConfig: existsSync(configFile) ? readJson(configFile) : {},
      bosTokenId: num(modelConfig.bos_token_id),
      eosTokenId: num(modelConfig.eos_token_id),
    });
  } catch (cause) {
    if (cause instanceof KVError) throw cause;
    throw new KVError(
      'TOKENIZER_INVALID',
      `Cannot build a tokenizer from ${file}: ${(cause as Error).message}`,
      {
        hint: 'The tokenizer.json may use a feature @huggingface/tokenizers does not support; remove it to use the byte tokenizer.',
        cause,
      },
    );
  }
}
