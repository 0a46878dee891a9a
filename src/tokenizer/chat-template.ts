/**
 * The chat template of the built-in tokenizer (and the fallback for HF tokenizers, whose
 * Jinja templates are not evaluated): each message as `<|role|>\n{content}\n`, then
 * `<|assistant|>\n` to prompt the reply.
 */
export function simpleChatTemplate(messages: ReadonlyArray<{ role: string; content: string }>): string {
  let out = '';
  for (const m of messages) out += `<|${m.role}|>\n${m.content}\n`;
  return `${out}<|assistant|>\n`;
}
