/**
 * loadTokenizer: the byte tokenizer for built-in presets; for a checkpoint directory (or a
 * bundled model's name), its `tokenizer.json` when present (else the byte tokenizer), with
 * `tokenizer_config.json` and an optional `chat_template.jinja`; without it, the byte
 * mapping of text with the checkpoint's vocabulary and special ids.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  BYTE_BOS_TOKEN_ID,
  BYTE_EOS_TOKEN_ID,
  getModelPreset,
  resolveModelPath,
} from '../config/model-presets.ts';
import { KVError } from '../errors/index.ts';
import { ByteTokenizer } from './byte-tokenizer.ts';
import { HFTokenizer } from './hf-tokenizer.ts';
import type { TokenizerLike } from './types.ts';

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (cause) {
    throw new KVError('TOKENIZER_INVALID', `Cannot read ${file}`, {
      hint: 'Fix or re-download the tokenizer files next to the weights.',
      cause,
    });
  }
}

function readJson(file: string): Record<string, unknown> {
  try {
    return JSON.parse(readText(file)) as Record<string, unknown>;
  } catch (cause) {
    if (cause instanceof KVError) throw cause;
    throw new KVError('TOKENIZER_INVALID', `Cannot read ${file} as JSON`, {
      hint: 'Fix or re-download the tokenizer files next to the weights.',
      cause,
    });
  }
}

export function loadTokenizer(modelNameOrDir: string): TokenizerLike {
  if (getModelPreset(modelNameOrDir) !== undefined) return new ByteTokenizer();
  const dir = resolveModelPath(modelNameOrDir);
  const file = join(dir, 'tokenizer.json');
  const optional = (name: string) => (existsSync(join(dir, name)) ? join(dir, name) : null);
  const modelConfigFile = optional('config.json');
  const modelConfig = modelConfigFile === null ? {} : readJson(modelConfigFile);
  const num = (v: unknown): number | null =>
    typeof v === 'number' ? v : Array.isArray(v) && typeof v[0] === 'number' ? v[0] : null;
  if (!existsSync(file)) return byteTokenizerFor(modelConfig, num);
  const configFile = optional('tokenizer_config.json');
  const templateFile = optional('chat_template.jinja');
  try {
    return new HFTokenizer(readJson(file), {
      tokenizerConfig: configFile === null ? {} : readJson(configFile),
      bosTokenId: num(modelConfig.bos_token_id),
      eosTokenId: num(modelConfig.eos_token_id),
      chatTemplate: templateFile === null ? null : readText(templateFile),
      origin: dir,
      nameOrPath: modelNameOrDir,
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

/**
 * No tokenizer.json: text is UTF-8 bytes, but the vocabulary, BOS and EOS are the
 * checkpoint's (`vocab_size`, `bos_token_id`, `eos_token_id` of config.json), so every id the
 * model can generate is a valid prompt and /detokenize id.
 */
function byteTokenizerFor(
  config: Record<string, unknown>,
  num: (v: unknown) => number | null,
): ByteTokenizer {
  const vocabSize = num(config['vocab_size']);
  if (vocabSize === null) return new ByteTokenizer();
  const bos = 'bos_token_id' in config ? num(config['bos_token_id']) : BYTE_BOS_TOKEN_ID;
  return new ByteTokenizer({
    vocabSize,
    bosTokenId: bos !== null && bos < vocabSize ? bos : null,
    eosTokenId: num(config['eos_token_id']) ?? BYTE_EOS_TOKEN_ID,
  });
}
