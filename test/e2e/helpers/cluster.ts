/**
 * Real `kvconnect serve` processes (P, D, a plain reference) and the proxy in front of P and
 * D, for the end-to-end tests. Every process joins one ProcessGroup; `close()` stops all.
 */
import { DEMO_DEFAULTS, type DemoOptions } from '../../../src/demo/options.ts';
import { ProcessGroup, type ServeProcess, startServe } from '../../../src/demo/processes.ts';
import { planTopology } from '../../../src/demo/topology.ts';
import { setLogLevel } from '../../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../../src/proxy/proxy-server.ts';

export interface Cluster {
  /** The model every server serves (the demo's default unless overridden). */
  model: string;
  prefill: ServeProcess;
  decode: ServeProcess;
  reference: ServeProcess;
  proxy: RunningProxy;
  close(): Promise<void>;
}

export async function startCluster(
  connector: 'NixlConnector' | 'NixlPushConnector',
  overrides: Partial<DemoOptions> = {},
): Promise<Cluster> {
  setLogLevel('error');
  const options: DemoOptions = { ...DEMO_DEFAULTS, connector, kvLoadFailurePolicy: 'fail', ...overrides };
  const group = new ProcessGroup();
  const topology = await planTopology(connector, options);
  const env = { KVCONNECT_LOG_LEVEL: 'error' };
  let proxy: RunningProxy | undefined;
  try {
    const [prefill, decode, reference] = await Promise.all([
      startServe('prefill', topology.prefillArgs, { timeoutMs: 20_000, group, env }),
      startServe('decode', topology.decodeArgs, { timeoutMs: 20_000, group, env }),
      startServe('reference', topology.referenceArgs, { timeoutMs: 20_000, group, env }),
    ]);
    proxy = await startProxy(
      resolveProxyOptions({
        prefill: [prefill.url],
        decode: [decode.url],
        port: 0,
        kvConnector: connector,
        push: topology.push,
      }),
    );
    const running = proxy;
    return {
      model: options.model,
      prefill,
      decode,
      reference,
      proxy,
      close: async () => {
        await running.close();
        await group.stopAll();
      },
    };
  } catch (e) {
    await proxy?.close();
    await group.stopAll();
    throw e;
  }
}

export async function postJson(url: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** Text of a streamed completion or chat (concatenated deltas), failing on an error event. */
export async function streamedText(res: Response): Promise<string> {
  let text = '';
  for (const line of (await res.text()).split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const chunk = JSON.parse(line.slice(6)) as {
      error?: { message: string };
      choices?: Array<{ text?: string; delta?: { content?: string } }>;
    };
    if (chunk.error) throw new Error(chunk.error.message);
    const c = chunk.choices?.[0];
    text += c?.text ?? c?.delta?.content ?? '';
  }
  return text;
}

interface LogprobsChunk {
  error?: { message: string };
  choices?: Array<{ logprobs?: { tokens?: string[]; content?: Array<{ token: string }> } | null }>;
}

function labelsOf(chunk: LogprobsChunk): string[] {
  if (chunk.error) throw new Error(chunk.error.message);
  const lp = chunk.choices?.[0]?.logprobs;
  return lp?.tokens ?? lp?.content?.map((c) => c.token) ?? [];
}

/**
 * The generated token ids of a completion or chat response, streamed or not, read from the
 * logprobs of a request sent with `return_tokens_as_token_ids` (completions: `logprobs: 0`;
 * chat: `logprobs: true`). Outputs are compared by these ids: two different tokens can
 * decode to the same text (e.g. both to U+FFFD).
 */
export async function generatedTokenIds(res: Response, stream: boolean): Promise<number[]> {
  const labels: string[] = [];
  if (stream) {
    for (const line of (await res.text()).split('\n')) {
      if (line.startsWith('data: ') && line !== 'data: [DONE]')
        labels.push(...labelsOf(JSON.parse(line.slice(6))));
    }
  } else {
    labels.push(...labelsOf((await res.json()) as LogprobsChunk));
  }
  return labels.map((label) => {
    const m = /^token_id:(\d+)$/.exec(label);
    if (m === null) throw new Error(`expected token_id:{id} labels, got ${JSON.stringify(label)}`);
    return Number(m[1]);
  });
}

export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
