/**
 * Request identity (docs/serve.md#request-ids): the external id comes from X-Request-Id (or
 * is random); the engine's internal id appends 8 random hex chars so two servers given the
 * same X-Request-Id never share an internal id, unless
 * VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1.
 */
import { randomFillSync, randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { type Environment, readEnv } from '../util/envs.ts';

const MAX_EXTERNAL_ID_LENGTH = 256;

export function externalRequestId(req: IncomingMessage): string {
  const header = req.headers['x-request-id'];
  const value = Array.isArray(header) ? header[0] : header;
  if (value && value.length <= MAX_EXTERNAL_ID_LENGTH && /^[\x21-\x7e]+$/.test(value)) return value;
  return randomUUID().replaceAll('-', '');
}

export function randomizationDisabled(env?: Environment): boolean {
  return readEnv('VLLM_DISABLE_REQUEST_ID_RANDOMIZATION', env);
}

/** `{base}-{8 hex}`, or `base` itself when randomization is disabled. */
export function internalRequestId(base: string, disableRandomization: boolean): string {
  return disableRandomization ? base : `${base}-${randomSuffix()}`;
}

// One crypto call per 512 ids instead of one per request (it showed in the server profile).
const suffixPool = Buffer.alloc(4 * 512);
let suffixOffset = suffixPool.length;

function randomSuffix(): string {
  if (suffixOffset === suffixPool.length) {
    randomFillSync(suffixPool);
    suffixOffset = 0;
  }
  const hex = suffixPool.toString('hex', suffixOffset, suffixOffset + 4);
  suffixOffset += 4;
  return hex;
}
