/**
 * A checkpoint's tokenizer as GGUF's `tokenizer.ggml.*` block for llama.cpp's BPE ("gpt2")
 * vocabulary: the tokens in id order, a type per token, the merges in rank order, the special
 * ids, and the pre-tokenizer's name.
 *
 * - `tokenizer.json` with a byte-level BPE model (GPT-2's byte-to-unicode alphabet, GPT-2's
 *   split regex, no prefix space) maps to `tokenizer.ggml.pre = "gpt-2"`; llama.cpp then
 *   splits and merges text as @huggingface/tokenizers does. Anything else is refused, naming
 *   the field, rather than converted into a tokenizer that splits text differently.
 * - No `tokenizer.json`: the engine encodes text as UTF-8 bytes (ids 0–255). The block is the
 *   256 byte symbols with no merges, so llama.cpp tokenizes text to the same ids; the other
 *   ids are unused placeholders and BOS/EOS are config.json's.
 *
 * Token types are llama.cpp's: 1 normal, 3 control, 4 user-defined, 5 unused.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HFModelConfig } from '../../src/config/model-presets.ts';
import { type GgufKV, GgufType } from './gguf-file.ts';

export const TOKEN_TYPE = { NORMAL: 1, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5 } as const;

/** GPT-2's reversible byte → printable character map (the byte-level BPE alphabet). */
export function byteLevelAlphabet(): string[] {
  const printable = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(printable(b) ? b : next++));
  return out;
}

function refuse(file: string, field: string, problem: string): Error {
  return new Error(
    `gguf: ${file}: ${field} ${problem}; the converter writes llama.cpp's byte-level BPE ("gpt2", pre "gpt-2") only`,
  );
}

interface TokenizerJson {
  model?: { type?: string; vocab?: Record<string, number>; merges?: Array<string | [string, string]> };
  added_tokens?: Array<{ id: number; content: string; special?: boolean }>;
  pre_tokenizer?: { type?: string; add_prefix_space?: boolean; use_regex?: boolean } | null;
  normalizer?: unknown;
}

function specialIds(config: HFModelConfig): { bos: number | null; eos: number | null } {
  const first = (v: unknown): number | null =>
    typeof v === 'number' ? v : Array.isArray(v) && typeof v[0] === 'number' ? v[0] : null;
  return { bos: first(config.bos_token_id), eos: first(config.eos_token_id) };
}

function specialKVs(config: HFModelConfig, addBos: boolean): GgufKV[] {
  const { bos, eos } = specialIds(config);
  const kvs: GgufKV[] = [];
  if (bos !== null) kvs.push({ key: 'tokenizer.ggml.bos_token_id', type: GgufType.UINT32, value: bos });
  if (eos !== null) kvs.push({ key: 'tokenizer.ggml.eos_token_id', type: GgufType.UINT32, value: eos });
  kvs.push({ key: 'tokenizer.ggml.add_bos_token', type: GgufType.BOOL, value: addBos && bos !== null });
  kvs.push({ key: 'tokenizer.ggml.add_eos_token', type: GgufType.BOOL, value: false });
  return kvs;
}

function block(
  pre: string,
  tokens: string[],
  types: number[],
  merges: string[],
  config: HFModelConfig,
  addBos: boolean,
): GgufKV[] {
  return [
    { key: 'tokenizer.ggml.model', type: GgufType.STRING, value: 'gpt2' },
    { key: 'tokenizer.ggml.pre', type: GgufType.STRING, value: pre },
    { key: 'tokenizer.ggml.tokens', type: GgufType.ARRAY, itemType: GgufType.STRING, value: tokens },
    { key: 'tokenizer.ggml.token_type', type: GgufType.ARRAY, itemType: GgufType.INT32, value: types },
    { key: 'tokenizer.ggml.merges', type: GgufType.ARRAY, itemType: GgufType.STRING, value: merges },
    ...specialKVs(config, addBos),
  ];
}

/** The block for a checkpoint directory (its tokenizer.json, or the byte vocabulary). */
export function tokenizerBlock(dir: string, config: HFModelConfig, vocabSize: number): GgufKV[] {
  const file = join(dir, 'tokenizer.json');
  if (!existsSync(file)) return byteVocabularyBlock(config, vocabSize);
  const tok = JSON.parse(readFileSync(file, 'utf8')) as TokenizerJson;
  if (tok.model?.type !== 'BPE') throw refuse(file, 'model.type', `is ${JSON.stringify(tok.model?.type)}`);
  if (tok.normalizer !== null && tok.normalizer !== undefined)
    throw refuse(file, 'normalizer', 'is set (byte-level BPE has none)');
  const pre = tok.pre_tokenizer;
  if (pre?.type !== 'ByteLevel' || pre.use_regex === false || pre.add_prefix_space === true) {
    throw refuse(
      file,
      'pre_tokenizer',
      `is ${JSON.stringify(pre)} (expected ByteLevel with GPT-2's regex, no prefix space)`,
    );
  }
  const tokens: Array<string | undefined> = new Array(vocabSize);
  const types = new Array<number>(vocabSize).fill(TOKEN_TYPE.NORMAL);
  for (const [text, id] of Object.entries(tok.model.vocab ?? {})) {
    if (id >= vocabSize)
      throw refuse(file, `model.vocab['${text}']`, `is id ${id}, beyond vocab_size ${vocabSize}`);
    tokens[id] = text;
  }
  for (const added of tok.added_tokens ?? []) {
    if (added.id >= vocabSize)
      throw refuse(file, 'added_tokens', `has id ${added.id}, beyond vocab_size ${vocabSize}`);
    tokens[added.id] = added.content;
    types[added.id] = added.special ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.USER_DEFINED;
  }
  // Embedding rows past the tokenizer's vocabulary: placeholders llama.cpp never produces.
  for (let id = 0; id < vocabSize; id++) {
    if (tokens[id] === undefined) {
      tokens[id] = `[PAD${id}]`;
      types[id] = TOKEN_TYPE.UNUSED;
    }
  }
  const merges = (tok.model.merges ?? []).map((m) => (typeof m === 'string' ? m : `${m[0]} ${m[1]}`));
  const tcFile = join(dir, 'tokenizer_config.json');
  const addBos = existsSync(tcFile)
    ? (JSON.parse(readFileSync(tcFile, 'utf8')) as { add_bos_token?: boolean }).add_bos_token === true
    : false;
  return block('gpt-2', tokens as string[], types, merges, config, addBos);
}

/** No tokenizer.json: UTF-8 bytes are ids 0–255, as the engine's byte tokenizer encodes text. */
export function byteVocabularyBlock(config: HFModelConfig, vocabSize: number): GgufKV[] {
  if (vocabSize < 256) throw new Error(`gguf: vocab_size ${vocabSize} cannot hold the 256 byte tokens`);
  const alphabet = byteLevelAlphabet();
  const { bos, eos } = specialIds(config);
  const tokens: string[] = [];
  const types: number[] = [];
  for (let id = 0; id < vocabSize; id++) {
    const special = id === bos || id === eos;
    tokens.push(id < 256 ? (alphabet[id] as string) : `<|unused_${id}|>`);
    types.push(special ? TOKEN_TYPE.CONTROL : id < 256 ? TOKEN_TYPE.NORMAL : TOKEN_TYPE.UNUSED);
  }
  // The engine's byte tokenizer prepends BOS when the checkpoint has one.
  return block('gpt-2', tokens, types, [], config, true);
}
