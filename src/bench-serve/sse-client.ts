/**
 * One streaming completion, timed: TTFT is the time to the first event carrying text,
 * ITLs are the gaps between text events, and the output token count comes from the
 * server's `usage` when it reports it (else one token per text event).
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

export interface SendOptions {
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

function eventText(data: unknown, chat: boolean): string {
  const choice = (data as { choices?: Array<Record<string, unknown>> }).choices?.[0];
  if (!choice) return '';
  if (chat) {
    const content = (choice['delta'] as { content?: unknown } | undefined)?.content;
    return typeof content === 'string' ? content : '';
  }
  return typeof choice['text'] === 'string' ? choice['text'] : '';
}

export async function sendStreaming(o: SendOptions): Promise<RequestResult> {
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
          if (text === '') continue;
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
    if (!result.ok) result.error = 'the stream carried no text';
  } catch (e) {
    result.error = e instanceof Error ? e.message : String(e);
  }
  return result;
}
