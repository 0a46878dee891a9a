/**
 * vLLM's development endpoints, served only with VLLM_SERVER_DEV_MODE=1 (as vLLM does; they
 * are unauthenticated): POST /reset_prefix_cache?reset_running_requests=&reset_external=.
 * Like vLLM it answers 200 with an empty body whether or not the cache could be cleared
 * (blocks in use keep it); the outcome is logged. Sleep mode: POST /sleep?level=&mode=,
 * POST /wake_up?tags=, GET /is_sleeping (engine/sleep-mode.ts); sleeping needs
 * --enable-sleep-mode, as vLLM's needs enable_sleep_mode.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AsyncEngineLike } from '../engine/api.ts';
import { PAUSE_MODES, type PauseMode, SLEEP_TAGS, type SleepTag } from '../engine/sleep-mode.ts';
import { KVError } from '../errors/index.ts';
import { type BodyRules, readBody, sendJson } from '../http/index.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { badRequest, boolWord } from './fields.ts';

const log = getLogger('kvconnect.server.dev-routes');

/** vLLM reads VLLM_SERVER_DEV_MODE as an integer: any non-zero value enables it. */
export function devModeFromEnv(env?: Environment): boolean {
  return readEnv('VLLM_SERVER_DEV_MODE', env);
}

/** A boolean query parameter as FastAPI parses one; anything else is a 400 naming it. */
export function queryBool(url: string, name: string): boolean {
  const value = new URL(url, 'http://server').searchParams.get(name);
  if (value === null) return false;
  const b = boolWord(value);
  if (b !== undefined) return b;
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

function sleepCapable(
  engine: AsyncEngineLike,
  enabled: boolean,
): Required<Pick<AsyncEngineLike, 'sleep' | 'wakeUp'>> {
  if (!enabled)
    throw badRequest(
      'Sleep mode is not enabled: start the server with --enable-sleep-mode.',
      'enable_sleep_mode',
      'Restart kvconnect serve with --enable-sleep-mode (and VLLM_SERVER_DEV_MODE=1) to use /sleep and /wake_up.',
    );
  if (!engine.sleep || !engine.wakeUp)
    throw new KVError('SERVER_NOT_IMPLEMENTED', 'This engine cannot sleep.', {
      hint: 'Serve an AsyncEngine (kvconnect serve does).',
    });
  return { sleep: engine.sleep.bind(engine), wakeUp: engine.wakeUp.bind(engine) };
}

/** POST /sleep?level=1|2&mode=abort|wait|keep (defaults 1 and abort, as vLLM); 200, empty body. */
export async function handleSleep(
  engine: AsyncEngineLike,
  enabled: boolean,
  body: BodyRules,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  await readBody(req, body);
  const query = new URL(req.url ?? '/', 'http://server').searchParams;
  const levelText = query.get('level') ?? '1';
  if (levelText !== '1' && levelText !== '2')
    throw badRequest(
      `Invalid value for query parameter 'level': expected 1 or 2, received ${JSON.stringify(levelText)}.`,
      'level',
      'Use ?level=1 (offload weights, discard the KV cache) or ?level=2 (discard both).',
    );
  const mode = query.get('mode') ?? 'abort';
  if (!(PAUSE_MODES as readonly string[]).includes(mode))
    throw badRequest(
      `Invalid value for query parameter 'mode': expected one of ${PAUSE_MODES.join(', ')}, received ${JSON.stringify(mode)}.`,
      'mode',
      'Use ?mode=abort (finish in-flight requests as aborted), wait (let them finish) or keep (resume them on wake-up).',
    );
  const { sleep } = sleepCapable(engine, enabled);
  log.info('Putting the engine to sleep (level %s, mode %s)', levelText, mode);
  await sleep(levelText === '1' ? 1 : 2, mode as PauseMode);
  res.writeHead(200, { 'content-length': 0 });
  res.end();
}

/** POST /wake_up?tags=weights&tags=kv_cache (none: everything); 200, empty body. */
export async function handleWakeUp(
  engine: AsyncEngineLike,
  enabled: boolean,
  body: BodyRules,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  await readBody(req, body);
  const tags = new URL(req.url ?? '/', 'http://server').searchParams.getAll('tags');
  for (const tag of tags)
    if (!(SLEEP_TAGS as readonly string[]).includes(tag))
      throw badRequest(
        `Invalid value for query parameter 'tags': expected ${SLEEP_TAGS.join(' or ')}, received ${JSON.stringify(tag)}.`,
        'tags',
        'Leave tags out to wake everything, or name ?tags=weights and/or ?tags=kv_cache.',
      );
  const { wakeUp } = sleepCapable(engine, enabled);
  log.info('wake up the engine with tags: %s', tags.length === 0 ? 'all' : tags.join(', '));
  wakeUp(tags.length === 0 ? null : (tags as SleepTag[]));
  res.writeHead(200, { 'content-length': 0 });
  res.end();
}

/** GET /is_sleeping: {"is_sleeping": bool}. */
export function handleIsSleeping(engine: AsyncEngineLike, res: ServerResponse): void {
  sendJson(res, 200, { is_sleeping: engine.isSleeping?.() ?? false });
}
