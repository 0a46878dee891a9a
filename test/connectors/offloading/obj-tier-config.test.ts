/**
 * The obj tier's keys as vLLM documents them: its documented example parses with vLLM's
 * defaults, NIXL engine options are accepted and reported, and every bad value names
 * `kv_connector_extra_config.secondary_tiers[i]....`, what was expected and received, and a fix.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { parseOffloadingConfig } from '../../../src/connectors/offloading/config.ts';
import { OffloadingConnector } from '../../../src/connectors/offloading/index.ts';
import type { ObjTierSpec } from '../../../src/connectors/offloading/obj-tier-config.ts';
import type { TierEventSettings } from '../../../src/connectors/offloading/tier-config.ts';
import { KVError } from '../../../src/errors/kv-error.ts';

const engineConfig = buildEngineConfig({
  model: 'tiny',
  block_size: 16,
  num_gpu_blocks: 32,
  max_model_len: 128,
});

function parseTier(tier: Record<string, unknown>): ObjTierSpec & TierEventSettings {
  const c = parseOffloadingConfig(
    { cpu_bytes_to_use: 1 << 20, spec_name: 'TieringOffloadingSpec', secondary_tiers: [tier] },
    engineConfig,
  );
  return c.secondaryTiers[0] as ObjTierSpec & TierEventSettings;
}

const STORE = { bucket: 'kv-cache', endpoint_override: 'minio.local:9000' };

describe('obj tier config', () => {
  test("vLLM's documented obj tier parses with vLLM's defaults (http, us-east-1, 4 io threads, path-style)", () => {
    const extra = {
      spec_name: 'TieringOffloadingSpec',
      cpu_bytes_to_use: 10737418240,
      secondary_tiers: [{ type: 'obj', store_config: STORE }],
    };
    // What `kvconnect check-config` runs.
    OffloadingConnector.validateExtraConfig(extra, engineConfig);
    const spec = parseTier({ type: 'obj', store_config: STORE });
    assert.equal(spec.bucket, 'kv-cache');
    assert.equal(spec.endpoint, 'http://minio.local:9000');
    assert.equal(spec.region, 'us-east-1');
    assert.equal(spec.credentials, null, 'no keys: the AWS default credential chain');
    assert.equal(spec.forcePathStyle, true);
    assert.equal(spec.prefix, '');
    assert.equal(spec.ioThreads, 4);
    assert.equal(spec.timeoutMs, 2000);
    assert.deepEqual(spec.ignored, []);
    assert.equal(spec.requestChecksum, null);
  });

  test('every store_config key vLLM passes on is honoured or reported', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvc-obj-ca-'));
    try {
      const ca = path.join(dir, 'ca.pem');
      writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
      const spec = parseTier({
        type: 'obj',
        store_config: {
          bucket: 'b-1',
          endpoint_override: 's3.example.com',
          scheme: 'https',
          access_key: 'AK',
          secret_key: 'SK',
          session_token: 'TOKEN',
          region: 'eu-west-1',
          ca_bundle: ca,
          use_virtual_addressing: 'true',
          req_checksum: 'required',
          resp_checksum: 'supported',
          accelerated: true,
          type: 'dell',
          backend_params: { crtMinLimit: 10485760 },
        },
        prefix: '/kv/',
        io_threads: '8',
        enable_kv_events: true,
        locality: 'REMOTE',
        timeout_ms: 500,
      });
      assert.equal(spec.endpoint, 'https://s3.example.com');
      assert.deepEqual(spec.credentials, { accessKeyId: 'AK', secretAccessKey: 'SK', sessionToken: 'TOKEN' });
      assert.equal(spec.region, 'eu-west-1');
      assert.match(spec.caBundle ?? '', /BEGIN CERTIFICATE/);
      assert.equal(spec.forcePathStyle, false);
      assert.equal(spec.requestChecksum, 'WHEN_REQUIRED');
      assert.equal(spec.responseChecksum, 'WHEN_SUPPORTED');
      assert.equal(spec.prefix, 'kv');
      assert.equal(spec.ioThreads, 8);
      assert.equal(spec.timeoutMs, 500);
      assert.equal(spec.enableKvEvents, true);
      assert.equal(spec.locality, 'REMOTE');
      assert.deepEqual(spec.ignored, [
        'accelerated=true',
        'type=dell',
        'backend_params.crtMinLimit=10485760',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('an endpoint_override with its own scheme is used as given', () => {
    assert.equal(
      parseTier({ type: 'obj', store_config: { bucket: 'b-1', endpoint_override: 'http://127.0.0.1:9000/' } })
        .endpoint,
      'http://127.0.0.1:9000',
    );
    assert.equal(
      parseTier({ type: 'obj', store_config: { bucket: 'b-1' } }).endpoint,
      null,
      "AWS S3's own endpoint",
    );
  });

  test('bad values name the field, what was expected and received, and the fix', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ type: 'obj' }, 'store_config'],
      [{ type: 'obj', store_config: { endpoint_override: 'x:1' } }, 'store_config.bucket'],
      [{ type: 'obj', store_config: { ...STORE, endpoint: 'x' } }, 'store_config.endpoint'],
      [{ type: 'obj', store_config: STORE, root_dir: '/x' }, 'root_dir'],
      [{ type: 'obj', store_config: { ...STORE, scheme: 'ftp' } }, 'store_config.scheme'],
      [
        { type: 'obj', store_config: { ...STORE, endpoint_override: 'ftp://x:1' } },
        'store_config.endpoint_override',
      ],
      [{ type: 'obj', store_config: { ...STORE, access_key: 'AK' } }, 'store_config.secret_key'],
      [{ type: 'obj', store_config: { ...STORE, secret_key: 'SK' } }, 'store_config.access_key'],
      [{ type: 'obj', store_config: { ...STORE, req_checksum: 'always' } }, 'store_config.req_checksum'],
      [
        { type: 'obj', store_config: { ...STORE, use_virtual_addressing: 'maybe' } },
        'store_config.use_virtual_addressing',
      ],
      [
        { type: 'obj', store_config: { ...STORE, backend_params: { bucket: 'other' } } },
        'store_config.backend_params',
      ],
      [
        { type: 'obj', store_config: { ...STORE, ca_bundle: '/nonexistent/ca.pem' } },
        'store_config.ca_bundle',
      ],
      [{ type: 'obj', store_config: STORE, io_threads: 0 }, 'io_threads'],
      [{ type: 'obj', store_config: STORE, locality: 'NEARBY' }, 'locality'],
      [{ type: 'obj', store_config: STORE, enable_kv_events: 'often' }, 'enable_kv_events'],
      [{ type: 'obj', store_config: STORE, timeout_ms: -5 }, 'timeout_ms'],
    ];
    for (const [tier, field] of cases) {
      assert.throws(
        () => parseTier(tier),
        (err: unknown) => {
          assert.ok(err instanceof KVError, String(err));
          assert.equal(
            err.field,
            `kv_connector_extra_config.secondary_tiers[0].${field}`,
            JSON.stringify(tier),
          );
          assert.match(err.message, /expected .* received/);
          assert.ok(err.hint && err.hint.length > 10, 'a hint');
          return true;
        },
      );
    }
  });
});
