/**
 * One streamed, greedy completion as the demo sends it, timed on the client side: time to
 * first token (first chunk carrying text or tokens) and end-to-end latency. It asks for
 * `return_tokens_as_token_ids`, so the output is compared by the token ids themselves.
 */
import { KVError } from '../errors/kv-error.ts';
import type { DemoRequest } from './workload.ts';

export interface CompletionResult {
  index: number;
  text: string;
  /** Generated token ids (from logprobs.tokens, `token_id:{id}`): outputs can decode to the same text. */
  tokenIds: number[];
  /** Per-token log-probabilities; greedy runs on the same KV give the same values. */
  logprobs: number[];
  finishReason: string | null;
  ttftMs: number;
  e2eMs: number;
}

interface StreamChunk {
  choices?: Array<{
    text?: string;
    finish_reason?: string | null;
    logprobs?: { tokens?: string[]; token_logprobs?: number[] } | null;
  }>;
  error?: { message?: string };
}

export async function streamCompletion(
  baseUrl: string,
  model: string,
  request: DemoRequest,
  requestId: string,
): Promise<CompletionResult> {
  const started = performance.now();
  const res = await fetch(`${baseUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': requestId },
    body: JSON.stringify({
      model,
      prompt: request.prompt,
      max_tokens: request.maxTokens,
      temperature: 0,
      logprobs: 1,
      return_tokens_as_token_ids: true,
      stream: true,
    }),
  });
  if (!res.ok || res.body === null) {
    const body = await res.text();
    throw new KVError(
      'DEMO_REQUEST_FAILED',
      `Request ${request.index} to ${baseUrl} failed: HTTP ${res.status} ${body.slice(0, 300)}`,
      {
        hint: "See the servers' output above; docs/demo.md (Troubleshooting) lists the usual causes.",
      },
    );
  }
  const result: CompletionResult = {
    index: request.index,
    text: '',
    tokenIds: [],
    logprobs: [],
    finishReason: null,
    ttftMs: Number.NaN,
    e2eMs: Number.NaN,
  };
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let newline = buffer.indexOf('\n');
    while (newline >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf('\n');
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      absorbChunk(result, JSON.parse(data) as StreamChunk, baseUrl, started);
    }
  }
  result.e2eMs = performance.now() - started;
  return result;
}

function absorbChunk(result: CompletionResult, chunk: StreamChunk, baseUrl: string, started: number): void {
  if (chunk.error) {
    throw new KVError(
      'DEMO_REQUEST_FAILED',
      `Request ${result.index} to ${baseUrl} failed mid-stream: ${chunk.error.message ?? 'unknown error'}`,
      {
        hint: "See the servers' output above; docs/demo.md (Troubleshooting) lists the usual causes.",
      },
    );
  }
  const choice = chunk.choices?.[0];
  if (!choice) return;
  const tokens = choice.logprobs?.tokens ?? [];
  if (Number.isNaN(result.ttftMs) && ((choice.text ?? '') !== '' || tokens.length > 0)) {
    result.ttftMs = performance.now() - started;
  }
  result.text += choice.text ?? '';
  result.tokenIds.push(...tokenIdsOf(tokens, result.index, baseUrl));
  result.logprobs.push(...(choice.logprobs?.token_logprobs ?? []));
  if (choice.finish_reason) result.finishReason = choice.finish_reason;
}

/** The ids of `token_id:{id}` labels (vLLM's rendering under return_tokens_as_token_ids). */
export function tokenIdsOf(labels: readonly string[], index: number, baseUrl: string): number[] {
  return labels.map((label) => {
    const match = /^token_id:(\d+)$/.exec(label);
    if (!match) {
      throw new KVError(
        'DEMO_REQUEST_FAILED',
        `Request ${index} to ${baseUrl} returned the token "${label}" where "token_id:{id}" was expected`,
        {
          hint: 'The demo needs servers that honour return_tokens_as_token_ids (kvconnect serve does).',
        },
      );
    }
    return Number(match[1]);
  });
}
