/**
 * A HF `tokenizer.json` (plus optional `tokenizer_config.json`) through the
 * @huggingface/tokenizers package, behind the TokenizerLike interface.
 *
 * Special tokens follow transformers: when tokenizer_config.json sets `add_bos_token` /
 * `add_eos_token`, they decide whether encode() adds BOS / EOS (as LlamaTokenizerFast
 * rebuilds its post-processor from them); otherwise the tokenizer.json post-processor does.
 * Chat prompts rendered by the model's own template are encoded without special tokens,
 * as vLLM does, because such templates write BOS themselves.
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { KVError } from '../errors/index.ts';
import {
  type ChatMessage,
  type ChatRenderOptions,
  JinjaChatTemplate,
  pickChatTemplate,
  simpleChatTemplate,
} from './chat-template.ts';
import type { EncodeOptions, GrammarVocabulary, TokenizerLike } from './types.ts';

export interface HFTokenizerOptions {
  /** Parsed tokenizer_config.json ({} when absent). */
  tokenizerConfig?: Record<string, unknown>;
  /** From the model's config.json, used when tokenizer_config.json names no tokens. */
  bosTokenId?: number | null;
  eosTokenId?: number | null;
  /** A chat_template.jinja file's text; takes precedence over tokenizer_config's chat_template. */
  chatTemplate?: string | null;
  /** Where the files came from, for messages. */
  origin?: string;
  /** The model as the user named it (transformers' name_or_path). */
  nameOrPath?: string;
}

/** A decoder and, for a `Sequence`, its steps, as plain objects. */
function decoderSteps(decoder: unknown): Record<string, unknown>[] {
  if (decoder === null || typeof decoder !== 'object') return [];
  const d = decoder as Record<string, unknown>;
  if (d['type'] === 'Sequence' && Array.isArray(d['decoders'])) return d['decoders'].flatMap(decoderSteps);
  return [d];
}

function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (
    value !== null &&
    typeof value === 'object' &&
    typeof (value as { content?: unknown }).content === 'string'
  ) {
    return (value as { content: string }).content;
  }
  return null;
}

/** AddedToken objects ({content, ...}) as their text, as vLLM serializes init_kwargs. */
function plainTokens(value: unknown): unknown {
  const content = tokenContent(value);
  if (content !== null && typeof value === 'object') return content;
  if (Array.isArray(value)) return value.map(plainTokens);
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plainTokens(v)]));
  return value;
}

const TEMPLATE_TOKENS = ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'sep_token', 'cls_token'];

export class HFTokenizer implements TokenizerLike {
  readonly eosTokenId: number;
  readonly bosTokenId: number | null;
  readonly vocabSize: number;
  readonly #tokenizer: Tokenizer;
  readonly #unkTokenId: number | null;
  /** BOS/EOS decided by tokenizer_config.json, or null to follow the post-processor. */
  readonly #addSpecial: { bos: boolean; eos: boolean } | null;
  readonly #chat: JinjaChatTemplate | null;
  readonly #specials: Record<string, string>;
  readonly #config: Record<string, unknown>;
  readonly #templateSource: string | null;
  readonly #nameOrPath: string | null;
  readonly #decoder: unknown;

  constructor(tokenizerJson: object, options: HFTokenizerOptions = {}) {
    const config = options.tokenizerConfig ?? {};
    this.#tokenizer = new Tokenizer(tokenizerJson, config);
    this.#decoder = (tokenizerJson as { decoder?: unknown }).decoder ?? null;
    const idOf = (key: string): number | null => {
      const content = tokenContent(config[key]);
      return content === null ? null : (this.#tokenizer.token_to_id(content) ?? null);
    };
    this.bosTokenId = idOf('bos_token') ?? options.bosTokenId ?? null;
    this.eosTokenId = idOf('eos_token') ?? options.eosTokenId ?? -1;
    let max = -1;
    for (const id of this.#tokenizer.get_vocab(true).values()) if (id > max) max = id;
    this.vocabSize = max + 1;
    const unk = (tokenizerJson as { model?: { unk_token?: unknown } }).model?.unk_token;
    this.#unkTokenId = typeof unk === 'string' ? (this.#tokenizer.token_to_id(unk) ?? null) : null;
    const flag = (key: string) => (typeof config[key] === 'boolean' ? (config[key] as boolean) : null);
    const addBos = flag('add_bos_token');
    const addEos = flag('add_eos_token');
    if (addBos === null && addEos === null) {
      this.#addSpecial = null;
    } else {
      const template = this.#rawEncode('', true);
      this.#addSpecial = {
        bos: addBos ?? (template.length > 0 && template[0] === this.bosTokenId),
        eos: addEos ?? (template.length > 0 && template[template.length - 1] === this.eosTokenId),
      };
    }
    const source = options.chatTemplate ?? pickChatTemplate(config.chat_template);
    const specials: Record<string, string> = {};
    for (const key of TEMPLATE_TOKENS) {
      const content = tokenContent(config[key]);
      if (content !== null) specials[key] = content;
    }
    this.#specials = specials;
    this.#config = config;
    this.#templateSource = source;
    this.#nameOrPath = options.nameOrPath ?? null;
    this.#chat =
      source === null ? null : new JinjaChatTemplate(source, specials, options.origin ?? 'the tokenizer');
  }

  /**
   * The vocabulary for XGrammar, typed as its `TokenizerInfo.from_huggingface` does: a
   * `ByteFallback` decoder step means byte-fallback tokens, a `ByteLevel` one GPT-2's byte
   * alphabet, anything else raw text; a `Strip` of one leading character after `▁` → space
   * replacement means the tokenizer prepends a space. Added special tokens are empty.
   */
  grammarVocabulary(): GrammarVocabulary {
    const tokens: string[] = new Array(this.vocabSize).fill('');
    for (const [token, id] of this.#tokenizer.get_vocab(true)) tokens[id] = token;
    for (const added of this.#specialTokenIds()) tokens[added] = '';
    const steps = decoderSteps(this.#decoder);
    const types = steps.map((d) => d['type']);
    const kind = types.includes('ByteFallback')
      ? 'byte_fallback'
      : types.includes('ByteLevel')
        ? 'byte_level'
        : 'raw';
    const prependSpace = steps.some(
      (d) =>
        (d['type'] === 'Strip' && d['start'] === 1) ||
        (d['type'] === 'Metaspace' && d['prepend_scheme'] !== 'never' && d['add_prefix_space'] !== false),
    );
    return { tokens, kind, prependSpace };
  }

  #specialTokenIds(): number[] {
    const ids: number[] = [];
    for (const [id, token] of this.#tokenizer.get_added_tokens_decoder()) if (token.special) ids.push(id);
    return ids;
  }

  /**
   * The tokenizer's configuration as transformers keeps it (init_kwargs: tokenizer_config.json
   * with added tokens as their text, the chat template, name_or_path) and the class vLLM
   * reports, `Cached` + the fast tokenizer class AutoTokenizer loads.
   */
  describe(): Record<string, unknown> {
    const { vocab_file: _v, merges_file: _m, ...config } = this.#config;
    const out = plainTokens(config) as Record<string, unknown>;
    if (this.#templateSource !== null) out['chat_template'] = this.#templateSource;
    if (this.#nameOrPath !== null) out['name_or_path'] = this.#nameOrPath;
    const declared = typeof config['tokenizer_class'] === 'string' ? config['tokenizer_class'] : null;
    const fast =
      declared === null
        ? 'PreTrainedTokenizerFast'
        : declared.endsWith('Fast')
          ? declared
          : `${declared}Fast`;
    out['tokenizer_class'] = `Cached${fast}`;
    return out;
  }

  /** True when the model ships its own chat template. */
  get hasChatTemplate(): boolean {
    return this.#chat !== null;
  }

  #rawEncode(text: string, addSpecialTokens: boolean): number[] {
    // Some models of the library leave out-of-vocabulary pieces undefined; map them to <unk>.
    const ids = this.#tokenizer.encode(text, { add_special_tokens: addSpecialTokens }).ids as (
      | number
      | undefined
    )[];
    return ids.map((id) => {
      if (id !== undefined) return id;
      if (this.#unkTokenId !== null) return this.#unkTokenId;
      throw new KVError(
        'TOKENIZER_INVALID',
        `The tokenizer has no id for a piece of ${JSON.stringify(text)} and no unk_token`,
        {
          hint: 'Use a tokenizer.json whose model defines unk_token, or a byte-level BPE tokenizer.',
        },
      );
    });
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const withSpecial = options.addSpecialTokens ?? true;
    if (!withSpecial || this.#addSpecial === null) return this.#rawEncode(text, withSpecial);
    const ids = this.#rawEncode(text, false);
    if (this.#addSpecial.bos && this.bosTokenId !== null) ids.unshift(this.bosTokenId);
    if (this.#addSpecial.eos && this.eosTokenId >= 0) ids.push(this.eosTokenId);
    return ids;
  }

  decode(ids: readonly number[]): string {
    if (ids.length === 0) return '';
    return this.#tokenizer.decode([...ids], { skip_special_tokens: true });
  }

  /** The template a request renders with: its own (when given), else the model's. */
  #templateFor(options: ChatRenderOptions): JinjaChatTemplate | null {
    if (options.chatTemplate == null) return this.#chat;
    return new JinjaChatTemplate(options.chatTemplate, this.#specials, 'the request');
  }

  applyChatTemplate(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions = {}): string {
    const template = this.#templateFor(options);
    return template === null ? simpleChatTemplate(messages, options) : template.render(messages, options);
  }

  encodeChat(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions = {}): number[] {
    const template = this.#templateFor(options);
    if (template === null) return this.encode(simpleChatTemplate(messages, options));
    return this.encode(template.render(messages, options), { addSpecialTokens: false });
  }
}
