/**
 * One streaming completion, timed: TTFT is the time to the first event carrying a choice
 * with text (possibly empty, as vLLM's bench counts it: a token can decode to no text, e.g. a
 * special token or the first byte of a multi-byte character), ITLs are the gaps between such
 * events, and the output token count comes from the server's `usage` when it reports it
 * (else one token per event). A stream without any such event is a failed request.
 */
import { type Dispatcher, request } from 'undici';

export interface RequestResult {
  ok: boolean;
  error?: string;
  promptLen: number;
  startMs: number;
  ttftMs: number;
  e2eMs: number;
  itlMs: number[];
  outputTokens: number;
  text: string;
}

export interface StreamingRequest {
  url: string;
  body: Record<string, unknown>;
  chat: boolean;
  headers: Record<string, string>;
  dispatcher: Dispatcher;
  timeoutMs: number;
  promptLen: number;
  /** performance.now() of the run's start, so startMs is relative. */
  runStart: number;
}

/** The text of an event's first choice; null when the event carries no token (chat's role-only chunk, usage-only chunks). */
function eventText(data: unknown, chat: boolean): string | null {
  const choice = (data as { choices?: Array<Record<string, unknown>> }).choices?.[0];
  if (!choice) return null;
  if (chat) {
    const delta = choice['delta'] as { content?: unknown; role?: unknown } | undefined;
    // The role-only opening chunk is not a token (kvconnect sends it before the first one).
    if (delta?.role !== undefined && delta.content === '') return null;
    return typeof delta?.content === 'string' ? delta.content : null;
  }
  return typeof choice['text'] === 'string' ? choice['text'] : null;
}

export async function sendStreaming(o: StreamingRequest): Promise<RequestResult> {
  const start = performance.now();
  const result: RequestResult = {
    ok: false,
    promptLen: o.promptLen,
    startMs: start - o.runStart,
    ttftMs: 0,
    e2eMs: 0,
    itlMs: [],
    outputTokens: 0,
    text: '',
  };
  let events = 0;
  let usageTokens: number | undefined;
  let last = 0;
  try {
    const res = await request(o.url, {
      method: 'POST',
      dispatcher: o.dispatcher,
      headers: { 'content-type': 'application/json', ...o.headers },
      body: JSON.stringify(o.body),
      signal: AbortSignal.timeout(o.timeoutMs),
    });
    if (res.statusCode !== 200) {
      result.error = `HTTP ${res.statusCode}: ${(await res.body.text()).slice(0, 200)}`;
      return result;
    }
    let buffer = '';
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      buffer += chunk.toString('utf8');
      let cut = buffer.indexOf('\n\n');
      while (cut >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        cut = buffer.indexOf('\n\n');
        for (const line of event.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const payload = line.slice(5).trim();
          if (payload === '[DONE]' || payload === '') continue;
          const data = JSON.parse(payload) as { usage?: { completion_tokens?: number } | null };
          if (typeof data.usage?.completion_tokens === 'number') usageTokens = data.usage.completion_tokens;
          const text = eventText(data, o.chat);
          if (text === null) continue;
          const now = performance.now();
          if (events === 0) result.ttftMs = now - start;
          else result.itlMs.push(now - last);
          last = now;
          events += 1;
          result.text += text;
        }
      }
    }
    result.e2eMs = performance.now() - start;
    result.outputTokens = usageTokens ?? events;
    result.ok = events > 0;
    if (!result.ok) result.error = 'the stream carried no completion chunk';
  } catch (e) {
    result.error = e instanceof Error ? e.message : String(e);
  }
  return result;
}
