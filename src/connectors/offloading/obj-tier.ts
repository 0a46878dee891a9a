/**
 * The `obj` secondary tier: one S3 object per chunk, through @aws-sdk/client-s3, against AWS
 * S3 or any S3-compatible server. Objects carry the checksummed frame of ./block-frame.ts;
 * a lookup reads only the frame header (a ranged GET) and checks it against the key and the
 * object's size, so a foreign or truncated object is a miss before any load is promised.
 * `io_threads` bounds the requests in flight (the HTTP agents' sockets). Every request is
 * bounded by `timeoutMs`; a network error, 403, 5xx or timeout answers "miss", counts, and
 * warns once per outage. `probe()` runs once at startup and fails with the field to fix.
 */
import http from 'node:http';
import https from 'node:https';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { KVError } from '../../errors/kv-error.ts';
import { getLogger } from '../../logging/logger.ts';
import { decodeFrame, encodeFrame, FRAME_HEADER_BYTES, frameHeaderMatches } from './block-frame.ts';
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
import type { ObjTierSpec } from './obj-tier-config.ts';
import { TierHealth } from './tier-health.ts';

const log = getLogger('kvconnect.connectors.offloading.obj-tier');

/** Maps a tier key (an offload chunk key) to its object key in the bucket. */
export type ObjectKeyOf = (key: string) => string;

/** The run configuration of the key namespace (vLLM's config.json), as an object. */
export interface ObjManifest {
  key: string;
  body: string;
}

export interface ObjTierOptions {
  spec: ObjTierSpec;
  objectKeyOf: ObjectKeyOf;
  manifest?: ObjManifest | null;
}

/** The startup probe reads this key under the prefix; it never exists. */
export const PROBE_OBJECT = '__kvconnect_probe__';
/** The probe may take longer than one tier operation (a cold TLS handshake), never long. */
const PROBE_MIN_MS = 3000;

interface S3Failure {
  name?: string;
  Code?: string;
  code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
}

function statusOf(err: unknown): number | undefined {
  return (err as S3Failure | null)?.$metadata?.httpStatusCode;
}

function isNotFound(err: unknown): boolean {
  const e = err as S3Failure | null;
  return e?.name === 'NoSuchKey' || (e?.name === 'NotFound' && statusOf(err) === 404);
}

export class ObjTier implements KVTier {
  readonly kind = 'obj' as const;
  readonly medium = 'STORAGE' as const;
  readonly spec: ObjTierSpec;
  readonly health: TierHealth;
  readonly objectKeyOf: ObjectKeyOf;
  readonly manifest: ObjManifest | null;
  readonly #client: S3Client;
  readonly #agents: (http.Agent | https.Agent)[];
  readonly #stats = emptyTierStats();

  constructor(options: ObjTierOptions) {
    const spec = options.spec;
    this.spec = spec;
    this.objectKeyOf = options.objectKeyOf;
    this.manifest = options.manifest ?? null;
    this.health = new TierHealth(`obj tier ${this.location}`, spec.timeoutMs);
    const agentOptions = { keepAlive: true, maxSockets: spec.ioThreads };
    const httpAgent = new http.Agent(agentOptions);
    const httpsAgent = new https.Agent({ ...agentOptions, ...(spec.caBundle ? { ca: spec.caBundle } : {}) });
    this.#agents = [httpAgent, httpsAgent];
    const config: S3ClientConfig = {
      region: spec.region,
      forcePathStyle: spec.forcePathStyle,
      // One attempt: a failed chunk is recomputed, which is cheaper than waiting for a retry.
      maxAttempts: 1,
      requestHandler: {
        httpAgent,
        httpsAgent,
        requestTimeout: spec.timeoutMs,
        connectionTimeout: spec.timeoutMs,
      },
      ...(spec.endpoint ? { endpoint: spec.endpoint } : {}),
      ...(spec.credentials ? { credentials: spec.credentials } : {}),
      ...(spec.requestChecksum ? { requestChecksumCalculation: spec.requestChecksum } : {}),
      ...(spec.responseChecksum ? { responseChecksumValidation: spec.responseChecksum } : {}),
    };
    this.#client = new S3Client(config);
  }

  /** `s3://bucket/prefix at endpoint`, for messages. */
  get location(): string {
    const where = this.spec.prefix
      ? `s3://${this.spec.bucket}/${this.spec.prefix}`
      : `s3://${this.spec.bucket}`;
    return `${where} at ${this.spec.endpoint ?? `AWS S3 (${this.spec.region})`}`;
  }

  get timeoutMs(): number {
    return this.health.timeoutMs;
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    const stored = await Promise.all(
      entries.map((e) =>
        this.health.run(
          'put',
          async () => {
            const body = encodeFrame(e.key, e.value);
            await this.#client.send(
              new PutObjectCommand({
                Bucket: this.spec.bucket,
                Key: this.objectKeyOf(e.key),
                Body: body,
                ContentLength: body.byteLength,
                ContentType: 'application/octet-stream',
              }),
            );
            this.#stats.puts++;
            this.#stats.putBytes += e.value.byteLength;
            return e.key;
          },
          () => null,
        ),
      ),
    );
    return stored.filter((k): k is string => k !== null);
  }

  async getMany(keys: readonly string[]): Promise<(Uint8Array | null)[]> {
    return Promise.all(
      keys.map((key) =>
        this.health.run(
          'get',
          () => this.#get(key),
          () => null,
        ),
      ),
    );
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    return Promise.all(
      keys.map((key) =>
        this.health.run(
          'has',
          () => this.#hasFrame(key),
          () => false,
        ),
      ),
    );
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    await Promise.all(
      keys.map((key) =>
        this.health.run(
          'delete',
          async () => {
            await this.#client.send(
              new DeleteObjectCommand({ Bucket: this.spec.bucket, Key: this.objectKeyOf(key) }),
            );
          },
          () => undefined,
        ),
      ),
    );
  }

  stats(): TierStats {
    return { ...this.#stats, errors: this.health.failures };
  }

  /** The bucket keeps what it stores: the tier evicts nothing (a lifecycle rule may). */
  takeEvicted(): string[] {
    return [];
  }

  async close(): Promise<void> {
    this.#client.destroy();
    for (const agent of this.#agents) agent.destroy();
  }

  /**
   * Reads one object that never exists: "no such key" proves the endpoint answers, the
   * bucket exists and the credentials may read it. Anything else throws a KVError naming
   * the store_config field to fix. Then writes the namespace's manifest if it is missing.
   */
  async probe(): Promise<void> {
    if (this.spec.ignored.length > 0) {
      log.warn(
        'obj tier %s: NIXL OBJ engine options have no effect here (kvconnect uses the AWS SDK for JavaScript): %s',
        this.location,
        this.spec.ignored.join(', '),
      );
    }
    const key = this.spec.prefix ? `${this.spec.prefix}/${PROBE_OBJECT}` : PROBE_OBJECT;
    const abort = new AbortController();
    const ms = Math.max(this.spec.timeoutMs, PROBE_MIN_MS);
    const timer = setTimeout(() => abort.abort(), ms);
    try {
      await this.#client.send(new GetObjectCommand({ Bucket: this.spec.bucket, Key: key }), {
        abortSignal: abort.signal,
      });
    } catch (err) {
      // Only S3's own answer counts: a bare 404 may come from anything listening there.
      if ((err as S3Failure | null)?.name !== 'NoSuchKey')
        throw this.#probeError(err, abort.signal.aborted ? ms : null);
    } finally {
      clearTimeout(timer);
    }
    await this.#writeManifest();
  }

  /** The manifest is written once per namespace, by the first engine; failing to write it only warns. */
  async #writeManifest(): Promise<void> {
    const m = this.manifest;
    if (!m) return;
    try {
      await this.#client.send(new HeadObjectCommand({ Bucket: this.spec.bucket, Key: m.key }));
      return;
    } catch (err) {
      if (statusOf(err) !== 404) {
        log.warn('obj tier %s: could not read %s (%s)', this.location, m.key, String(err));
        return;
      }
    }
    try {
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.spec.bucket,
          Key: m.key,
          Body: m.body,
          ContentType: 'application/json',
        }),
      );
    } catch (err) {
      log.warn(
        'obj tier %s: could not write %s (%s); blocks are stored all the same',
        this.location,
        m.key,
        String(err),
      );
    }
  }

  async #get(key: string): Promise<Uint8Array | null> {
    this.#stats.gets++;
    let bytes: Uint8Array;
    try {
      const out = await this.#client.send(
        new GetObjectCommand({ Bucket: this.spec.bucket, Key: this.objectKeyOf(key) }),
      );
      if (!out.Body) return null;
      bytes = await out.Body.transformToByteArray();
    } catch (err) {
      if (isNotFound(err)) return null;
      throw err;
    }
    const payload = decodeFrame(key, bytes);
    if (payload === null) {
      this.#stats.corrupt++;
      await this.#client
        .send(new DeleteObjectCommand({ Bucket: this.spec.bucket, Key: this.objectKeyOf(key) }))
        .catch(() => undefined);
      return null;
    }
    this.#stats.hits++;
    this.#stats.getBytes += payload.byteLength;
    return payload;
  }

  /** The object exists and its first bytes are this key's frame header for the object's size. */
  async #hasFrame(key: string): Promise<boolean> {
    try {
      const out = await this.#client.send(
        new GetObjectCommand({
          Bucket: this.spec.bucket,
          Key: this.objectKeyOf(key),
          Range: `bytes=0-${FRAME_HEADER_BYTES - 1}`,
        }),
      );
      if (!out.Body) return false;
      const head = await out.Body.transformToByteArray();
      // "bytes 0-15/TOTAL"; a server that ignores Range sends the whole object.
      const total = /\/(\d+)$/.exec(out.ContentRange ?? '')?.[1];
      const size = total === undefined ? head.byteLength : Number(total);
      return frameHeaderMatches(key, head, size);
    } catch (err) {
      if (isNotFound(err) || statusOf(err) === 416) return false;
      throw err;
    }
  }

  #probeError(err: unknown, timedOutAfterMs: number | null): KVError {
    const e = (err ?? {}) as S3Failure;
    const status = statusOf(err);
    const code = e.Code ?? e.name ?? e.code ?? '';
    const sysCode = e.code ?? (e as { cause?: { code?: string } }).cause?.code ?? '';
    const where = this.spec.storeConfigPath;
    const said = `${code || 'error'}${status ? ` (HTTP ${status})` : ''}: ${e.message ?? String(err)}`;
    let field: string;
    let hint: string;
    if (
      timedOutAfterMs !== null ||
      /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNRESET|EHOSTUNREACH|TimeoutError/.test(
        `${sysCode} ${code}`,
      )
    ) {
      field = 'endpoint_override';
      hint = `Nothing answered at ${this.spec.endpoint ?? 'the AWS endpoint'}${timedOutAfterMs !== null ? ` within ${timedOutAfterMs} ms` : ''}: check endpoint_override (host:port, or a URL) and scheme, and that the S3 server is running.`;
    } else if (/CERT|SELF_SIGNED|UNABLE_TO_VERIFY/i.test(`${sysCode} ${code} ${e.message ?? ''}`)) {
      field = 'ca_bundle';
      hint = `The server's TLS certificate is not trusted: give ca_bundle the PEM file of the CA that signed it${this.spec.caBundlePath ? ` (${this.spec.caBundlePath} does not hold it)` : ''}.`;
    } else if (/EPROTO|ERR_SSL|wrong version number/i.test(`${sysCode} ${code} ${e.message ?? ''}`)) {
      field = 'scheme';
      hint =
        'The TLS handshake failed: a plain-HTTP server needs "scheme":"http" (and an http:// endpoint_override).';
    } else if (code === 'NoSuchBucket') {
      field = 'bucket';
      hint = `Bucket "${this.spec.bucket}" does not exist at this endpoint: create it (aws s3 mb s3://${this.spec.bucket}) or fix store_config.bucket.`;
    } else if (code === 'InvalidAccessKeyId' || code === 'CredentialsProviderError') {
      field = 'access_key';
      hint = this.spec.credentials
        ? 'The server does not know this access key: fix store_config.access_key (and secret_key).'
        : 'No credentials were found: set store_config.access_key and secret_key, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE.';
    } else if (code === 'SignatureDoesNotMatch') {
      field = 'secret_key';
      hint =
        'The server rejected the request signature: fix store_config.secret_key (and region, for AWS S3).';
    } else if (code === 'AuthorizationHeaderMalformed' || code === 'PermanentRedirect' || status === 301) {
      field = 'region';
      hint = "The bucket lives in another region: set store_config.region to the bucket's region.";
    } else if (status === 403) {
      field = 'access_key';
      hint = `Access denied: the credentials need s3:GetObject, s3:PutObject and s3:ListBucket on bucket "${this.spec.bucket}" (without ListBucket S3 answers 403 for a missing key).`;
    } else {
      field = 'endpoint_override';
      hint =
        'The endpoint did not answer as an S3 server would (a missing object must be answered with NoSuchKey): check endpoint_override, scheme and any proxy in between.';
    }
    return new KVError(
      'KV_OFFLOAD_TIER_UNREACHABLE',
      `Object store tier ${this.location} failed its startup probe: ${said}`,
      { field: `${where}.${field}`, hint, cause: err },
    );
  }
}
