/**
 * Optional shared-secret authentication: HMAC-SHA256 challenge–response in both directions,
 * so the secret never crosses the wire and a replayed answer is useless (fresh nonces).
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { type EnvName, readEnv } from '../util/envs.ts';

export const SECRET_ENV = 'KVCONNECT_TRANSFER_SECRET' satisfies EnvName;

export function resolveSecret(explicit: string | undefined): string | undefined {
  if (explicit !== undefined && explicit !== '') return explicit;
  const env = readEnv(SECRET_ENV);
  return env === undefined || env === '' ? undefined : env;
}

export function newNonce(): string {
  return randomBytes(16).toString('hex');
}

/** The proof one side sends: role separates the client's proof from the server's. */
export function authProof(
  secret: string,
  role: 'client' | 'server',
  serverNonce: string,
  clientNonce: string,
): string {
  return createHmac('sha256', secret).update(`${role}|${serverNonce}|${clientNonce}`).digest('hex');
}

export function verifyProof(
  secret: string,
  role: 'client' | 'server',
  serverNonce: string,
  clientNonce: string,
  proof: unknown,
): boolean {
  if (typeof proof !== 'string') return false;
  const expected = Buffer.from(authProof(secret, role, serverNonce, clientNonce), 'hex');
  const got = Buffer.from(proof, 'hex');
  return got.length === expected.length && timingSafeEqual(got, expected);
}
