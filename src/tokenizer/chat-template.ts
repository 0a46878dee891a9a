/**
 * Chat templates. A model's own template (tokenizer_config.json's `chat_template`, or a
 * `chat_template.jinja` file) is rendered with @huggingface/jinja as transformers renders
 * it: `messages`, `add_generation_prompt`, the special tokens as strings, and the request's
 * `chat_template_kwargs`. Models without one (the byte tokenizer, HF tokenizers without a
 * template) use simpleChatTemplate. `continue_final_message` cuts the rendered text right
 * after the last message's content, as transformers does, so the model continues it.
 */
import { Template } from '@huggingface/jinja';
import { KVError } from '../errors/index.ts';

export type ChatMessage = { role: string; content: string };

/** How one request renders its messages (vLLM's chat request fields). */
export interface ChatRenderOptions {
  /** add_generation_prompt: end with the assistant's turn header (default true). */
  addGenerationPrompt?: boolean;
  /** continue_final_message: end inside the last message, so the model continues it (default false). */
  continueFinalMessage?: boolean;
  /** A request's own template (only when the server trusts request templates). */
  chatTemplate?: string | null;
  /** chat_template_kwargs: extra variables the template sees. */
  templateKwargs?: Readonly<Record<string, unknown>>;
}

/** The fallback: each message as `<|role|>\n{content}\n`, then `<|assistant|>\n`. */
export function simpleChatTemplate(
  messages: ReadonlyArray<ChatMessage>,
  options: ChatRenderOptions = {},
): string {
  let out = '';
  for (const m of messages) out += `<|${m.role}|>\n${m.content}\n`;
  if (options.continueFinalMessage) return continueFinalMessage(out, messages);
  return options.addGenerationPrompt === false ? out : `${out}<|assistant|>\n`;
}

/**
 * transformers' continue_final_message: the rendered chat up to the end of the last
 * message's content (a template that strips the content's surrounding spaces is matched
 * on the stripped text). A template that drops part of the message cannot be continued.
 */
export function continueFinalMessage(rendered: string, messages: ReadonlyArray<ChatMessage>): string {
  const final = messages[messages.length - 1]?.content ?? '';
  const stripped = final.trim();
  const at = rendered.lastIndexOf(stripped);
  if (at < 0) {
    throw new KVError(
      'CHAT_TEMPLATE_ERROR',
      'continue_final_message is set but the final message does not appear in the chat after applying the chat template.',
      {
        hint: 'The chat template changes the final message; send it as the template writes it, or leave continue_final_message out.',
        field: 'continue_final_message',
      },
    );
  }
  const leading = final.trimStart();
  const keepsSpacing = rendered.slice(at, at + leading.length) === leading;
  return rendered.slice(0, at + (keepsSpacing ? leading.length : stripped.length));
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

  render(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions = {}): string {
    const rendered = this.#renderRaw(messages, options);
    return options.continueFinalMessage ? continueFinalMessage(rendered, messages) : rendered;
  }

  #renderRaw(messages: ReadonlyArray<ChatMessage>, options: ChatRenderOptions): string {
    try {
      return this.#template.render({
        ...this.#specialTokens,
        ...options.templateKwargs,
        messages: messages.map((m) => ({ ...m })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
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
