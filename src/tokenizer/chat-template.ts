/**
 * Chat templates. A model's own template (tokenizer_config.json's `chat_template`, or a
 * `chat_template.jinja` file) is rendered with @huggingface/jinja as transformers renders
 * it: `messages`, `add_generation_prompt`, the special tokens as strings. Models without
 * one (the byte tokenizer, HF tokenizers without a template) use simpleChatTemplate.
 */
import { Template } from '@huggingface/jinja';
import { KVError } from '../errors/index.ts';

export type ChatMessage = { role: string; content: string };

/** The fallback: each message as `<|role|>\n{content}\n`, then `<|assistant|>\n`. */
export function simpleChatTemplate(messages: ReadonlyArray<ChatMessage>): string {
  let out = '';
  for (const m of messages) out += `<|${m.role}|>\n${m.content}\n`;
  return `${out}<|assistant|>\n`;
}

/** tokenizer_config.json's chat_template: a string, or a list of {name, template} (the one named "default"). */
export function pickChatTemplate(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value.find(
      (t): t is { name: string; template: string } =>
        t !== null && typeof t === 'object' && t.name === 'default' && typeof t.template === 'string',
    );
    return named?.template ?? null;
  }
  return null;
}

export class JinjaChatTemplate {
  readonly #template: Template;
  readonly #specialTokens: Record<string, string>;

  /** `specialTokens`: bos_token, eos_token, ... as the template sees them. */
  constructor(source: string, specialTokens: Record<string, string>, origin: string) {
    try {
      this.#template = new Template(source);
    } catch (cause) {
      throw new KVError(
        'TOKENIZER_INVALID',
        `The chat template of ${origin} does not parse: ${(cause as Error).message}`,
        {
          hint: 'Fix chat_template in tokenizer_config.json (or chat_template.jinja), or remove it to use the plain fallback template.',
          cause,
        },
      );
    }
    this.#specialTokens = specialTokens;
  }

  render(messages: ReadonlyArray<ChatMessage>): string {
    try {
      return this.#template.render({
        ...this.#specialTokens,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: true,
      });
    } catch (cause) {
      throw new KVError(
        'CHAT_TEMPLATE_ERROR',
        `The model's chat template rejected the messages: ${(cause as Error).message}`,
        {
          hint: "Send messages in the form the model's chat template accepts (e.g. alternating user/assistant roles).",
          field: 'messages',
          cause,
        },
      );
    }
  }
}
