/**
 * The chat request fields that decide how messages become a prompt, read as vLLM reads them:
 * `add_generation_prompt` (default true), `continue_final_message` (default false; not
 * both), `chat_template` and `chat_template_kwargs` (a template sent with the request,
 * directly or as `chat_template_kwargs.chat_template`, is refused unless the server runs
 * with --trust-request-chat-template). The answer's role is the server's response role
 * (--response-role, default "assistant") when a generation prompt is added, else the last
 * message's role, as vLLM's get_chat_request_role.
 */
import type { ChatRenderOptions } from '../engine/api.ts';
import { type Body, badRequest, optBool, optObject, optString } from './fields.ts';

export const DEFAULT_RESPONSE_ROLE = 'assistant';

export interface ChatTemplatePolicy {
  /** --trust-request-chat-template */
  trustRequestChatTemplate?: boolean;
  /** --response-role */
  responseRole?: string;
}

export interface ChatPromptOptions {
  render: ChatRenderOptions;
  /** The role the answer's message carries. */
  responseRole: string;
}

export function readChatPromptOptions(
  body: Body,
  messages: ReadonlyArray<{ role: string }>,
  policy: ChatTemplatePolicy = {},
): ChatPromptOptions {
  const addGenerationPrompt = optBool(body, 'add_generation_prompt') ?? true;
  const continueFinalMessage = optBool(body, 'continue_final_message') ?? false;
  if (addGenerationPrompt && continueFinalMessage)
    throw badRequest(
      'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
      'continue_final_message',
      'Set "add_generation_prompt": false to continue the final message.',
    );
  const kwargs = optObject(body, 'chat_template_kwargs') ?? {};
  const requestTemplate = optString(body, 'chat_template') ?? null;
  const kwargsTemplate = kwargs['chat_template'];
  if (kwargsTemplate !== undefined && kwargsTemplate !== null && typeof kwargsTemplate !== 'string')
    throw badRequest(
      `chat_template_kwargs.chat_template must be a string, received ${JSON.stringify(kwargsTemplate)}.`,
      'chat_template_kwargs',
      'Send the template as a Jinja string.',
    );
  const chatTemplate = requestTemplate ?? (kwargsTemplate as string | null | undefined) ?? null;
  if (chatTemplate !== null && policy.trustRequestChatTemplate !== true)
    throw badRequest(
      'Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.',
      requestTemplate !== null ? 'chat_template' : 'chat_template_kwargs',
      'Leave chat_template out to use the model template, or start the server with --trust-request-chat-template.',
    );
  const { chat_template: _template, ...templateKwargs } = kwargs;
  const last = messages[messages.length - 1];
  return {
    render: { addGenerationPrompt, continueFinalMessage, chatTemplate, templateKwargs },
    responseRole: addGenerationPrompt
      ? (policy.responseRole ?? DEFAULT_RESPONSE_ROLE)
      : (last?.role ?? DEFAULT_RESPONSE_ROLE),
  };
}
