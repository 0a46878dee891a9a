/**
 * One client completion through the proxy: parse the body, then pick P and D, run the
 * flow's legs and pass D's answer through, with retries and stream resumes when a backend
 * fails (./failover.ts). A client that disconnects aborts whatever legs are still open.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { headerValue, readJson } from '../http/index.ts';
import { readEnv } from '../util/envs.ts';
import { takeConversationId } from './conversation-cache.ts';
import { type FailoverDeps, RequestFailover } from './failover.ts';
import { KV_CACHE_SOURCE_HEADER } from './offloading-flow.ts';
import { chainedPrefixHashes, promptText } from './prefix-hash.ts';
import { badRequest, proxyBodyRules } from './proxy-errors.ts';
import type { Json } from './request-shaping.ts';

export type HandlerDeps = FailoverDeps;

const MAX_BODY_BYTES = 64 * 1024 * 1024;

async function parseClientBody(req: IncomingMessage): Promise<Json> {
  const body = await readJson(req, proxyBodyRules(MAX_BODY_BYTES));
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest('The request body must be a JSON object');
  }
  return body as Json;
}

export async function handleCompletion(
  deps: HandlerDeps,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { policy, options } = deps;
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort(new Error('client disconnected'));
  });

  const body = await parseClientBody(req);
  const conversationId = takeConversationId(body);
  const ctx = {
    prefixHashes: policy.needsPrefixHashes
      ? chainedPrefixHashes(promptText(body), options.prefixChunkBytes)
      : [],
    body,
  };
  const requestId = headerValue(req, 'x-request-id') ?? randomUUID();
  const auth = headerValue(req, 'authorization') ?? bearerFromEnv();
  const headers: Record<string, string> = auth === undefined ? {} : { authorization: auth };
  try {
    await new RequestFailover(deps, {
      path,
      body,
      requestId,
      headers,
      ctx,
      kvCacheSource: headerValue(req, KV_CACHE_SOURCE_HEADER),
      signal: abort.signal,
      res,
      conversationId,
    }).serve();
  } catch (e) {
    if (abort.signal.aborted && res.destroyed) return; // the client left; nothing to answer
    throw e;
  }
}

function bearerFromEnv(): string | undefined {
  const key = readEnv('OPENAI_API_KEY');
  return key ? `Bearer ${key}` : undefined;
}
