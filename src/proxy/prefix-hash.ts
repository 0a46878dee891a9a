/**
 * Chained prefix hashes of a prompt, for prefix-aware routing. The engine hashes token
 * blocks; the proxy has no tokenizer, so it hashes the prompt's UTF-8 bytes in fixed
 * chunks with the same chaining (hash_i = SHA-256(hash_{i-1} || chunk_i)). Two prompts that
 * share their first k chunks share their first k hashes, which approximates "share the
 * first k KV blocks" closely enough to pick the backend whose prefix cache is warm.
 */
import { createHash } from 'node:crypto';

const SEED = Buffer.alloc(32);

/** Hashes of every full chunk of `text`, in order (a shorter tail is not hashed). */
export function chainedPrefixHashes(text: string, chunkBytes: number): string[] {
  const bytes = Buffer.from(text, 'utf8');
  const hashes: string[] = [];
  let prev = SEED;
  for (let start = 0; start + chunkBytes <= bytes.length; start += chunkBytes) {
    prev = createHash('sha256')
      .update(prev)
      .update(bytes.subarray(start, start + chunkBytes))
      .digest();
    hashes.push(prev.toString('hex'));
  }
  return hashes;
}

/** The text that identifies a request's prompt: the prompt string(s) or the chat messages. */
export function promptText(body: Record<string, unknown>): string {
  const prompt = body['prompt'];
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt)) return JSON.stringify(prompt);
  const messages = body['messages'];
  if (Array.isArray(messages)) {
    return messages
      .map((m) => {
        if (typeof m !== 'object' || m === null) return String(m);
        const { role, content } = m as { role?: unknown; content?: unknown };
        return `${String(role)}\n${typeof content === 'string' ? content : JSON.stringify(content)}\n`;
      })
      .join('');
  }
  return '';
}
