/**
 * The `obj` secondary tier's keys, as vLLM's object-store tier reads them: `store_config`
 * (the S3 connection: bucket, endpoint_override, scheme, credentials, region, ca_bundle and
 * the NIXL OBJ backend's options), `prefix`, `io_threads`, plus kvconnect's `timeout_ms`.
 * `enable_kv_events` and `locality` are every tier's (tier-config.ts). Unknown keys are
 * refused, as vLLM's constructor refuses them.
 */
import { readFileSync } from 'node:fs';
import { configError } from '../../config/config-error.ts';
import { parseExtraBoolean } from '../../config/extra-config.ts';
import { parseCount, parseTimeoutMs } from './tier-fields.ts';

/** S3 answers within tens of milliseconds, a chunk of several MiB takes longer than a disk read. */
export const DEFAULT_OBJ_TIMEOUT_MS = 2000;
export const DEFAULT_OBJ_IO_THREADS = 4;

export interface ObjTierSpec {
  type: 'obj';
  /** Where the tier's store_config sits in the config, for error fields. */
  storeConfigPath: string;
  bucket: string;
  /** Full endpoint URL (scheme included), or null for AWS S3's own endpoint of the region. */
  endpoint: string | null;
  region: string;
  /** null: the AWS SDK's default credential chain (environment, profile files, instance roles). */
  credentials: { accessKeyId: string; secretAccessKey: string; sessionToken?: string } | null;
  /** PEM text of `ca_bundle`, or null for Node's default trust store. */
  caBundle: string | null;
  caBundlePath: string | null;
  forcePathStyle: boolean;
  requestChecksum: 'WHEN_SUPPORTED' | 'WHEN_REQUIRED' | null;
  responseChecksum: 'WHEN_SUPPORTED' | 'WHEN_REQUIRED' | null;
  /** `prefix`: prepended to every object key; '' for none. */
  prefix: string;
  ioThreads: number;
  timeoutMs: number;
  /** Accepted NIXL engine options that have no effect here (logged once when the tier starts). */
  ignored: string[];
}

const TIER_KEYS = new Set([
  'type',
  'store_config',
  'prefix',
  'io_threads',
  'enable_kv_events',
  'locality',
  'timeout_ms',
]);

/** store_config keys that map onto the S3 client. */
const STORE_KEYS = new Set([
  'bucket',
  'endpoint_override',
  'access_key',
  'secret_key',
  'session_token',
  'region',
  'scheme',
  'ca_bundle',
  'use_virtual_addressing',
  'req_checksum',
  'resp_checksum',
  'accelerated',
  'type',
  'backend_params',
]);

/** NIXL OBJ backend options with no meaning for kvconnect's client: accepted, reported. */
const NIXL_ONLY_KEYS = ['accelerated', 'type'] as const;

const EXAMPLE =
  '{"type":"obj","store_config":{"bucket":"kv-cache","endpoint_override":"http://127.0.0.1:9000","access_key":"...","secret_key":"..."}}';

function optionalString(raw: Record<string, unknown>, key: string, where: string, hint: string): string {
  const v = raw[key];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw configError(`${where}.${key}`, 'a string', v, hint);
  return v;
}

function checksumMode(raw: Record<string, unknown>, key: string, where: string) {
  const v = raw[key];
  if (v === undefined || v === null || v === '') return null;
  if (v === 'required') return 'WHEN_REQUIRED' as const;
  if (v === 'supported') return 'WHEN_SUPPORTED' as const;
  throw configError(
    `${where}.${key}`,
    '"required" or "supported"',
    v,
    'Use "supported" to checksum every request/response, "required" only where S3 demands it.',
  );
}

function refuseUnknown(raw: Record<string, unknown>, known: Set<string>, where: string): void {
  for (const key of Object.keys(raw)) {
    if (!known.has(key)) {
      throw configError(
        `${where}.${key}`,
        `one of the known keys (${[...known].join(', ')})`,
        raw[key],
        'Remove the key or fix its spelling.',
      );
    }
  }
}

/** The endpoint URL the client connects to, from `endpoint_override` and `scheme`. */
function endpointUrl(override: string, scheme: string, where: string): string | null {
  if (override === '') return null;
  const url = override.includes('://') ? override : `${scheme}://${override}`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw configError(
      `${where}.endpoint_override`,
      'a host[:port] or an http(s) URL',
      override,
      'Use e.g. "http://127.0.0.1:9000" or "s3.example.com".',
    );
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw configError(
      `${where}.endpoint_override`,
      'an http:// or https:// endpoint',
      override,
      'Use e.g. "http://127.0.0.1:9000".',
    );
  }
  return url.replace(/\/+$/, '');
}

export function parseObjTier(tier: Record<string, unknown>, where: string): ObjTierSpec {
  refuseUnknown(tier, TIER_KEYS, where);
  const store = tier['store_config'];
  if (typeof store !== 'object' || store === null || Array.isArray(store)) {
    throw configError(
      `${where}.store_config`,
      'an object with at least a bucket',
      store,
      `Give the obj tier its S3 connection, e.g. ${EXAMPLE}.`,
    );
  }
  const sc = store as Record<string, unknown>;
  const swhere = `${where}.store_config`;
  refuseUnknown(sc, STORE_KEYS, swhere);

  const bucket = sc['bucket'];
  if (typeof bucket !== 'string' || bucket === '') {
    throw configError(`${swhere}.bucket`, 'an S3 bucket name', bucket, `Name the bucket, e.g. ${EXAMPLE}.`);
  }
  const scheme = sc['scheme'] ?? 'http';
  if (scheme !== 'http' && scheme !== 'https') {
    throw configError(`${swhere}.scheme`, '"http" or "https"', scheme, 'Omit it for "http" (as vLLM).');
  }
  const override = optionalString(sc, 'endpoint_override', swhere, 'Use e.g. "http://127.0.0.1:9000".');
  const endpoint = endpointUrl(override, scheme, swhere);

  const accessKey = optionalString(sc, 'access_key', swhere, 'Give the access key id as a string.');
  const secretKey = optionalString(sc, 'secret_key', swhere, 'Give the secret key as a string.');
  const sessionToken = optionalString(sc, 'session_token', swhere, 'Give the session token as a string.');
  if ((accessKey === '') !== (secretKey === '')) {
    const missing = accessKey === '' ? 'access_key' : 'secret_key';
    throw configError(
      `${swhere}.${missing}`,
      'both access_key and secret_key, or neither',
      sc[missing],
      'Set both, or omit both to use the AWS default credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role).',
    );
  }
  const credentials =
    accessKey === ''
      ? null
      : { accessKeyId: accessKey, secretAccessKey: secretKey, ...(sessionToken ? { sessionToken } : {}) };

  const region = optionalString(sc, 'region', swhere, 'Use e.g. "us-east-1".') || 'us-east-1';

  const caPath = optionalString(sc, 'ca_bundle', swhere, 'Give the path of a PEM file.');
  let caBundle: string | null = null;
  if (caPath !== '') {
    try {
      caBundle = readFileSync(caPath, 'utf8');
    } catch (err) {
      throw configError(
        `${swhere}.ca_bundle`,
        'a readable PEM certificate bundle',
        caPath,
        `The file could not be read (${(err as NodeJS.ErrnoException).code ?? String(err)}); give the path of the CA certificates that signed the endpoint's TLS certificate.`,
      );
    }
    if (!caBundle.includes('-----BEGIN CERTIFICATE-----')) {
      throw configError(
        `${swhere}.ca_bundle`,
        'a PEM file with at least one certificate',
        caPath,
        'The file holds no "-----BEGIN CERTIFICATE-----" block; convert it to PEM.',
      );
    }
  }

  const vaRaw = sc['use_virtual_addressing'];
  let virtual = false;
  if (vaRaw !== undefined && vaRaw !== null && vaRaw !== '') {
    const b = parseExtraBoolean(vaRaw);
    if (b === null) {
      throw configError(
        `${swhere}.use_virtual_addressing`,
        'true or false',
        vaRaw,
        'Use false (path-style, what S3-compatible servers expect) or true (bucket.host).',
      );
    }
    virtual = b;
  }

  const ignored: string[] = [];
  for (const key of NIXL_ONLY_KEYS) {
    const v = sc[key];
    if (v !== undefined && v !== null && v !== '' && v !== false && v !== 'false')
      ignored.push(`${key}=${String(v)}`);
  }
  const bp = sc['backend_params'];
  if (bp !== undefined && bp !== null) {
    if (typeof bp !== 'object' || Array.isArray(bp)) {
      throw configError(
        `${swhere}.backend_params`,
        'an object',
        bp,
        'Omit it, or give NIXL OBJ backend options.',
      );
    }
    const reserved = Object.keys(bp).filter((k) => STORE_KEYS.has(k) || k === 'num_threads');
    if (reserved.length > 0) {
      throw configError(
        `${swhere}.backend_params`,
        'no keys that store_config already names',
        reserved.sort().join(', '),
        'Set those keys in store_config itself (io_threads for num_threads).',
      );
    }
    for (const [k, v] of Object.entries(bp)) ignored.push(`backend_params.${k}=${String(v)}`);
  }

  const prefix = optionalString(tier, 'prefix', where, 'Use a short path such as "kv".').replace(
    /^\/+|\/+$/g,
    '',
  );

  const ioThreads = parseCount(tier, 'io_threads', where, DEFAULT_OBJ_IO_THREADS);
  const timeoutMs = parseTimeoutMs(tier, where, DEFAULT_OBJ_TIMEOUT_MS);
  return {
    type: 'obj',
    storeConfigPath: swhere,
    bucket,
    endpoint,
    region,
    credentials,
    caBundle,
    caBundlePath: caPath === '' ? null : caPath,
    forcePathStyle: !virtual,
    requestChecksum: checksumMode(sc, 'req_checksum', swhere),
    responseChecksum: checksumMode(sc, 'resp_checksum', swhere),
    prefix,
    ioThreads,
    timeoutMs,
    ignored,
  };
}
