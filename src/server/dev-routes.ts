/**
 * vLLM's development endpoints, served only with VLLM_SERVER_DEV_MODE=1 (as vLLM does; they
 * are unauthenticated): POST /reset_prefix_cache?reset_running_requests=&reset_external=.
 * Like vLLM it answers 200 with an empty body whether or not the cache could be cleared
 * (blocks in use keep it); the outcome is logged.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AsyncEngineLike } from '../engine/api.ts';
import { KVError } from '../errors/index.ts';
import { type BodyRules, readBody } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { badRequest } from './fields.ts';

const log = getLogger('kvconnect.server.dev-routes');

/** vLLM reads VLLM_SERVER_DEV_MODE as an integer: any non-zero value enables it. */
export function devModeFromEnv(env?: Environment): boolean {
  return readEnv('VLLM_SERVER_DEV_MODE', env);
}

const TRUE = new Set(['1', 'true', 'yes', 'on', 't', 'y']);
const FALSE = new Set(['0', 'false', 'no', 'off', 'f', 'n']);

/** A boolean query parameter as FastAPI parses one; anything else is a 400 naming it. */
export function queryBool(url: string, name: string): boolean {
  const value = new URL(url, 'http://server').searchParams.get(name);
  if (value === null) return false;
  const v = value.toLowerCase();
  if (TRUE.has(v)) return true;
  if (FALSE.has(v)) return false;
  throw badRequest(
    `Invalid value for query parameter '${name}': expected a boolean, received ${JSON.stringify(value)}.`,
    name,
    `Use ?${name}=true or ?${name}=false.`,
  );
}

export async function handleResetPrefixCache(
  engine: AsyncEngineLike,
  body: BodyRules,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  await readBody(req, body);
  const resetRunningRequests = queryBool(req.url ?? '/', 'reset_running_requests');
  const resetConnector = queryBool(req.url ?? '/', 'reset_external');
  if (!engine.resetPrefixCache) {
    throw new KVError('SERVER_NOT_IMPLEMENTED', 'This engine cannot reset its prefix cache.', {
      hint: 'Serve an AsyncEngine (kvconnect serve does).',
    });
  }
  log.info('Resetting prefix cache...');
  const ok = await engine.resetPrefixCache({ resetRunningRequests, resetConnector });
  if (ok) log.info('Prefix cache reset');
  else log.warn('The prefix cache was not reset: KV blocks are in use (try ?reset_running_requests=true)');
  res.writeHead(200, { 'content-length': 0 });
  res.end();
}
