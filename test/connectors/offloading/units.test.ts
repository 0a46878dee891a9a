/**
 * OffloadingConnector units: config keys and vLLM's error strings, eviction policies (LRU
 * and ARC), store_threshold, the scheduler half (side-effect-free lookups, chunk
 * alignment, stores, KV events with their medium, "ask again" for secondary tiers).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { resolveModelInfo } from '../../../src/config/model-info.ts';
import { KVConnectorFactory } from '../../../src/connector/factory.ts';
import type { ConnectorRequest, SchedulerOutput } from '../../../src/connector/types.ts';
import { emptyConnectorOutput } from '../../../src/connector/types.ts';
import { ArcPolicy } from '../../../src/connectors/offloading/arc-policy.ts';
import { decodeFrame, encodeFrame } from '../../../src/connectors/offloading/block-frame.ts';
import { type OffloadingConfig, parseOffloadingConfig } from '../../../src/connectors/offloading/config.ts';
import { CpuSlotIndex } from '../../../src/connectors/offloading/cpu-slot-index.ts';
import { FsTier } from '../../../src/connectors/offloading/fs-tier.ts';
import { OffloadingConnector } from '../../../src/connectors/offloading/index.ts';
import { OffloadLayout } from '../../../src/connectors/offloading/layout.ts';
import { LookupTracker } from '../../../src/connectors/offloading/lookup-tracker.ts';
import { LruPolicy } from '../../../src/connectors/offloading/lru-policy.ts';
import { LoadTierFilter, parseLoadTierFilter } from '../../../src/connectors/offloading/request-params.ts';
import {
  OffloadScheduler,
  type OffloadSchedulerOptions,
} from '../../../src/connectors/offloading/scheduler.ts';
import { tierCacheHitSource } from '../../../src/connectors/offloading/stats.ts';
import { WORKER_META_KEY } from '../../../src/connectors/offloading/step-metadata.ts';
import { KVError } from '../../../src/errors/kv-error.ts';
import { BlockHashFunction, externalBlockHash } from '../../../src/kv/block-hash.ts';
import type { BlockHash, KVCacheBlocks } from '../../../src/kv/interfaces.ts';
import { buildKVCacheConfig } from '../../../src/kv/kv-cache-config.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { tinyRunLayout } from './helpers.ts';

const engineConfig = buildEngineConfig({
  model: 'tiny',
  block_size: 16,
  num_gpu_blocks: 64,
  max_model_len: 256,
});
const parse = (extra: Record<string, unknown>) => parseOffloadingConfig(extra, engineConfig);

function throwsKV(fn: () => unknown, message: string | RegExp, field?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof KVError, 'a KVError');
    if (typeof message === 'string') assert.equal(err.message, message);
    else assert.match(err.message, message);
    assert.ok(err.hint && err.hint.length > 10, 'it carries a hint');
    if (field) assert.equal(err.field, field);
    return true;
  });
}

describe('config', () => {
  test('defaults', () => {
    const c = parse({ cpu_bytes_to_use: 1 << 20 });
    assert.deepEqual(c, {
      cpuBytesToUse: 1 << 20,
      blocksPerChunk: 1,
      offloadBlockSize: 16,
      evictionPolicy: 'lru',
      evictionPolicyClass: null,
      storeThreshold: 0,
      maxTrackerSize: 64_000,
      selfDescribingKvEvents: false,
      offloadPromptOnly: true,
      specName: 'CPUOffloadingSpec',
      specClass: null,
      secondaryTiers: [],
    });
  });

  test("vLLM's exact error strings", () => {
    throwsKV(
      () => parse({}),
      'cpu_bytes_to_use must be specified in kv_connector_extra_config',
      'kv_connector_extra_config.cpu_bytes_to_use',
    );
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, block_size: 32, blocks_per_chunk: 2 }),
      "Specify only one of 'block_size' or 'blocks_per_chunk' in kv_connector_extra_config.",
    );
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, blocks_per_chunk: 0 }),
      "'blocks_per_chunk' must be greater than 0.",
    );
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, blocks_per_chunk: -3 }),
      "'blocks_per_chunk' must be greater than 0.",
    );
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, spec_name: 'FancySpec' }),
      'Unsupported spec type: FancySpec',
    );
  });

  test('block_size must be a multiple of the GPU block size; blocks_per_chunk sets the chunk', () => {
    assert.equal(parse({ cpu_bytes_to_use: 1, block_size: 64 }).blocksPerChunk, 4);
    assert.equal(parse({ cpu_bytes_to_use: 1, blocks_per_chunk: 2 }).offloadBlockSize, 32);
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, block_size: 40 }),
      /multiple of the GPU block size \(16\)/,
      'kv_connector_extra_config.block_size',
    );
  });

  test('other keys name field, expected and received', () => {
    for (const [extra, field] of [
      [{ cpu_bytes_to_use: -1 }, 'cpu_bytes_to_use'],
      [{ cpu_bytes_to_use: 1, eviction_policy: 'mru' }, 'eviction_policy'],
      [{ cpu_bytes_to_use: 1, store_threshold: 1.5 }, 'store_threshold'],
      [{ cpu_bytes_to_use: 1, offload_prompt_only: 'yes' }, 'offload_prompt_only'],
      [{ cpu_bytes_to_use: 1, secondary_tiers: [{ type: 'fs', root_dir: '/x' }] }, 'secondary_tiers'],
      [{ cpu_bytes_to_use: 1, spec_name: 'TieringOffloadingSpec' }, 'secondary_tiers'],
      [
        { cpu_bytes_to_use: 1, spec_name: 'TieringOffloadingSpec', secondary_tiers: [{ type: 's3' }] },
        'secondary_tiers[0].type',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'redis', url: 'http://x' }],
        },
        'secondary_tiers[0].url',
      ],
      [
        { cpu_bytes_to_use: 1, spec_name: 'TieringOffloadingSpec', secondary_tiers: [{ type: 'fs' }] },
        'secondary_tiers[0].root_dir',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', path: '/x' }],
        },
        'secondary_tiers[0].path',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', root_dir: '/x', n_read_threads: 0 }],
        },
        'secondary_tiers[0].n_read_threads',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', root_dir: '/x', locality: 'local' }],
        },
        'secondary_tiers[0].locality',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', root_dir: '/x', n_io_threads: 4 }],
        },
        'secondary_tiers[0].n_io_threads',
      ],
      [
        {
          cpu_bytes_to_use: 1,
          spec_name: 'TieringOffloadingSpec',
          store_threshold: 2,
          secondary_tiers: [{ type: 'fs', root_dir: '/x' }],
        },
        'store_threshold',
      ],
    ] as const) {
      assert.throws(
        () => parse(extra as Record<string, unknown>),
        (err: unknown) =>
          err instanceof KVError &&
          err.field === `kv_connector_extra_config.${field}` &&
          /expected .* received/.test(err.message) &&
          Boolean(err.hint),
        JSON.stringify(extra),
      );
    }
  });

  test('tiers parse with their defaults', () => {
    const c = parse({
      cpu_bytes_to_use: '1024',
      eviction_policy: 'arc',
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [
        { type: 'fs', root_dir: '/var/kv', capacity_bytes: 4096, n_read_threads: 32, locality: 'LOCAL' },
        { type: 'redis', url: 'redis://127.0.0.1:6379' },
        { type: 'redis', cluster_nodes: ['redis://a:1', 'redis://b:2'], timeout_ms: 50, key_prefix: 'p' },
      ],
    });
    assert.equal(c.cpuBytesToUse, 1024);
    assert.deepEqual(c.secondaryTiers, [
      {
        type: 'fs',
        rootDir: '/var/kv',
        nReadThreads: 32,
        nWriteThreads: 16,
        capacityBytes: 4096,
        timeoutMs: 200,
        enableKvEvents: false,
        locality: 'LOCAL',
      },
      {
        type: 'redis',
        url: 'redis://127.0.0.1:6379',
        clusterNodes: [],
        timeoutMs: 200,
        keyPrefix: 'kvconnect',
        enableKvEvents: false,
        locality: null,
      },
      {
        type: 'redis',
        url: null,
        clusterNodes: ['redis://a:1', 'redis://b:2'],
        timeoutMs: 50,
        keyPrefix: 'p',
        enableKvEvents: false,
        locality: null,
      },
    ]);
  });

  test('the registry loads the class; validateExtraConfig is what check-config runs; HMA supported', async () => {
    const cls = await KVConnectorFactory.getConnectorClassByName('OffloadingConnector');
    assert.equal(cls, OffloadingConnector);
    assert.equal(OffloadingConnector.supportsHMA, true);
    throwsKV(
      () => OffloadingConnector.validateExtraConfig({}, engineConfig),
      'cpu_bytes_to_use must be specified in kv_connector_extra_config',
    );
  });
});

describe('eviction policies', () => {
  const any = () => true;
  test('LRU evicts the least recently used, skipping pinned keys', () => {
    const lru = new LruPolicy(2);
    lru.insert('a', any);
    lru.insert('b', any);
    lru.touch('a');
    assert.deepEqual(lru.insert('c', any).evicted, ['b']);
    assert.deepEqual(lru.insert('d', (k) => k !== 'a').evicted, ['c']);
    assert.deepEqual(lru.residentKeys(), ['a', 'd']);
    assert.deepEqual(
      lru.insert('e', () => false),
      { inserted: false, evicted: [] },
    );
  });

  test('ARC keeps a re-used key through a scan of one-time keys (LRU loses it)', () => {
    const arc = new ArcPolicy(2);
    const lru = new LruPolicy(2);
    for (const p of [arc, lru]) {
      p.insert('hot', any);
      p.insert('b', any);
      p.touch('hot');
      for (const k of ['s1', 's2', 's3', 's4']) p.insert(k, any);
    }
    assert.ok(arc.has('hot'), 'ARC keeps the frequently used key');
    assert.ok(!lru.has('hot'), 'LRU evicted it');
    assert.ok(arc.t2.has('hot'));
    assert.ok(arc.b1.size > 0 && arc.b1.size <= 2, 'evicted one-time keys are remembered as ghosts, bounded');
  });

  test('ARC adapts p: a ghost hit in B1 grows T1, a ghost hit in B2 shrinks it', () => {
    const arc = new ArcPolicy(2);
    arc.insert('a', any);
    arc.insert('b', any);
    arc.insert('c', any); // evicts a → B1
    assert.ok(arc.b1.has('a'));
    assert.equal(arc.target, 0);
    arc.insert('a', any); // B1 hit
    assert.equal(arc.target, 1);
    assert.ok(arc.t2.has('a'), 'a ghost hit goes to T2');
    arc.touch('c'); // c → T2
    arc.insert('d', any); // T1 = {} or small: evicts from T2 → B2
    const inB2 = [...arc.b2.keys()];
    assert.equal(inB2.length, 1);
    arc.insert(inB2[0]!, any); // B2 hit
    assert.equal(arc.target, 0);
    assert.ok(arc.size <= 2);
    assert.ok(
      arc.t1.size + arc.b1.size <= 2 && arc.size + arc.b1.size + arc.b2.size <= 4,
      'directory bounded by 2c',
    );
  });

  test('ARC never evicts pinned keys and refuses when all are pinned', () => {
    const arc = new ArcPolicy(2);
    arc.insert('a', any);
    arc.insert('b', any);
    assert.deepEqual(
      arc.insert('c', () => false),
      { inserted: false, evicted: [] },
    );
    assert.deepEqual(arc.insert('c', (k) => k === 'b').evicted, ['b']);
  });
});

describe('store_threshold', () => {
  test('counts lookups in an LRU bounded to 64000 keys', () => {
    const t = new LookupTracker(2);
    assert.equal(t.maxSize, 64_000);
    assert.equal(t.shouldStore('x'), false);
    t.record('x');
    assert.equal(t.shouldStore('x'), false);
    t.record('x');
    assert.equal(t.shouldStore('x'), true);
    const small = new LookupTracker(2, 3);
    for (const k of ['a', 'b', 'c', 'd']) small.record(k);
    assert.equal(small.size, 3);
    assert.equal(small.count('a'), 0, 'the oldest key was dropped');
    assert.equal(new LookupTracker(0).shouldStore('never-seen'), true);
  });
});

test('block frames: checksum, key and length are all verified', () => {
  const payload = Uint8Array.from({ length: 100 }, (_, i) => i);
  const frame = encodeFrame('k', payload);
  assert.deepEqual(Buffer.from(decodeFrame('k', frame)!), Buffer.from(payload));
  assert.equal(decodeFrame('other', frame), null);
  assert.equal(decodeFrame('k', frame.subarray(0, 50)), null);
  const flipped = Buffer.from(frame);
  flipped[60] = (flipped[60] ?? 0) ^ 1;
  assert.equal(decodeFrame('k', flipped), null);
});

// ---- scheduler half ----
function hashes(tokens: number[]): BlockHash[] {
  const h = new BlockHashFunction('sha256_cbor');
  const out: BlockHash[] = [];
  for (let b = 0; (b + 1) * 16 <= tokens.length; b++)
    out.push(h.hashBlock(out[b - 1] ?? null, tokens, b * 16, (b + 1) * 16));
  return out;
}

function request(id: string, tokens: number[]): ConnectorRequest {
  return {
    requestId: id,
    promptTokenIds: tokens,
    allTokenIds: tokens,
    numTokens: tokens.length,
    numPromptTokens: tokens.length,
    numComputedTokens: 0,
    blockHashes: hashes(tokens),
    status: 'WAITING',
    maxTokens: 4,
    kvTransferParams: null,
  };
}

function blocksOf(ids: number[]): KVCacheBlocks {
  return {
    blocks: [],
    getBlockIds: () => [ids],
    getUnhashedBlockIds: () => ids,
    getUnhashedBlockIdsAllGroups: () => [ids],
  };
}

function output(
  newReqs: { id: string; blocks: number[]; computed: number; scheduled: number }[],
): SchedulerOutput {
  return {
    scheduledNewReqs: newReqs.map((r) => ({
      reqId: r.id,
      promptTokenIds: [],
      blockIds: [r.blocks],
      numComputedTokens: r.computed,
    })),
    scheduledCachedReqs: {
      reqIds: [],
      resumedFromPreemption: [],
      newBlockIds: [],
      newTokenIds: [],
      numComputedTokens: [],
    },
    numScheduledTokens: Object.fromEntries(newReqs.map((r) => [r.id, r.scheduled])),
    totalNumScheduledTokens: newReqs.reduce((n, r) => n + r.scheduled, 0),
    finishedReqIds: [],
    preemptedReqIds: [],
    kvConnectorMetadata: null,
  };
}

function schedulerWith(
  extra: Record<string, unknown>,
  tiers: FsTier[] = [],
  options: OffloadSchedulerOptions = {},
): { s: OffloadScheduler; config: OffloadingConfig } {
  const kvCacheConfig = buildKVCacheConfig({
    hfConfig: resolveModelInfo('tiny').hfConfig,
    blockSize: 16,
    numBlocks: 64,
    maxModelLen: 256,
  });
  const config = parse(extra);
  return {
    s: new OffloadScheduler(new OffloadLayout(engineConfig, kvCacheConfig, config), config, tiers, options),
    config,
  };
}

/** Admits, schedules the whole prompt in one step, and acknowledges the worker's stores. */
function computeAndStore(s: OffloadScheduler, req: ConnectorRequest, blockIds: number[]): number {
  s.updateStateAfterAlloc(req, blocksOf(blockIds), 0);
  const meta = s.buildConnectorMeta(
    output([{ id: req.requestId, blocks: blockIds, computed: 0, scheduled: req.numTokens }]),
  );
  s.updateConnectorOutput({
    ...emptyConnectorOutput(),
    kvConnectorWorkerMeta: {
      [WORKER_META_KEY]: {
        step: meta.step,
        promoted: [],
        failed: [],
        storedSecondary: [],
        evictedSecondary: [],
      },
    },
  });
  s.requestFinished(req);
  return meta.stores.length;
}

const PROMPT = Array.from({ length: 70 }, (_, i) => (i * 7 + 3) % 256);

describe('scheduler half', () => {
  test('lookups are chunk-aligned, leave one token to compute, and have no side effects', () => {
    const { s } = schedulerWith({
      cpu_bytes_to_use: 1 << 22,
      blocks_per_chunk: 2,
      self_describing_kv_events: true,
    });
    assert.deepEqual(s.getNumNewMatchedTokens(request('r0', PROMPT), 0), { count: 0, loadAsync: false });
    assert.equal(
      computeAndStore(s, request('r1', PROMPT), [1, 2, 3, 4, 5]),
      2,
      'two full 32-token chunks of 70 tokens',
    );
    const events = s.takeEvents();
    assert.equal(events.length, 2);
    assert.ok(
      events.every(
        (e) =>
          e.type === 'BlockStored' &&
          e.medium === 'CPU' &&
          e.blockHashes.length === 2 &&
          e.tokenIds.length === 32,
      ),
    );
    const order = s.index.policy.residentKeys();
    const req = request('r2', PROMPT);
    assert.deepEqual(s.getNumNewMatchedTokens(req, 0), { count: 64, loadAsync: false });
    assert.deepEqual(
      s.getNumNewMatchedTokens(req, 0),
      { count: 64, loadAsync: false },
      'asking again gives the same answer',
    );
    assert.deepEqual(
      s.getNumNewMatchedTokens(req, 16),
      { count: 48, loadAsync: false },
      'from a local hit inside the first chunk',
    );
    assert.deepEqual(s.getNumNewMatchedTokens(req, 32), { count: 32, loadAsync: false });
    assert.deepEqual(s.index.policy.residentKeys(), order, 'lookups do not touch the eviction order');
    assert.deepEqual(
      s.getNumNewMatchedTokens(request('r3', PROMPT.slice(0, 64)), 0),
      { count: 32, loadAsync: false },
      'a 64-token prompt keeps its last chunk to compute',
    );
  });

  test('a load pins its CPU slots (no eviction under it) and skips blocks already local', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 2 * 32768 });
    computeAndStore(s, request('a', PROMPT.slice(0, 40)), [1, 2, 3]);
    const req = request('b', PROMPT.slice(0, 40));
    assert.equal(s.getNumNewMatchedTokens(req, 16).count, 16);
    s.updateStateAfterAlloc(req, blocksOf([7, 8, 9]), 16);
    const meta = s.buildConnectorMeta(output([]));
    assert.equal(meta.loads.length, 1);
    assert.deepEqual(
      meta.loads[0]!.items.map((i) => [i.source, i.blockIds]),
      [['cpu', [8]]],
    );
    const other = Array.from({ length: 40 }, (_, i) => 255 - i);
    computeAndStore(s, request('c', other), [10, 11, 12]);
    assert.equal(
      s.getNumNewMatchedTokens(request('d', PROMPT.slice(0, 40)), 16).count,
      16,
      'the pinned chunk survived eviction',
    );
    const removed = s.takeEvents().filter((e) => e.type === 'BlockRemoved');
    assert.ok(removed.every((e) => e.type === 'BlockRemoved' && e.medium === 'CPU'));
  });

  test('store_threshold 2: a block is stored only once it has been looked up twice', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, store_threshold: 2 });
    assert.equal(computeAndStore(s, request('x1', PROMPT), [1, 2, 3, 4, 5]), 0, 'first sighting: not stored');
    assert.equal(computeAndStore(s, request('x2', PROMPT), [1, 2, 3, 4, 5]), 4, 'second sighting: stored');
    assert.equal(s.getNumNewMatchedTokens(request('x3', PROMPT), 0).count, 64);
  });

  test('offload_prompt_only=false also stores generated tokens', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, offload_prompt_only: false });
    const req = { ...request('g', PROMPT.slice(0, 40)), numPromptTokens: 20 };
    assert.equal(computeAndStore(s, req, [1, 2, 3]), 2);
    const { s: promptOnly } = schedulerWith({ cpu_bytes_to_use: 1 << 22 });
    assert.equal(
      computeAndStore(promptOnly, { ...request('g', PROMPT.slice(0, 40)), numPromptTokens: 20 }, [1, 2, 3]),
      1,
    );
  });

  test('write-through and fs evictions become STORAGE events; failed promotions free their slot', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, self_describing_kv_events: true }, [], {
      tierInfo: [{ medium: 'STORAGE', locality: 'LOCAL', enableKvEvents: true }],
    });
    const req = request('w', PROMPT.slice(0, 40));
    computeAndStore(s, req, [1, 2, 3]);
    s.takeEvents();
    const keys = [0, 1].map((c) => s.layout.chunkKeys(req.blockHashes, c)![0]!);
    const wm = {
      step: 0,
      promoted: [],
      failed: [],
      storedSecondary: [{ tier: 0, keys }],
      evictedSecondary: [{ tier: 0, keys: [keys[0]!] }],
    };
    s.updateConnectorOutput({ ...emptyConnectorOutput(), kvConnectorWorkerMeta: { [WORKER_META_KEY]: wm } });
    const events = s.takeEvents();
    assert.deepEqual(
      events.map((e) => [e.type, 'medium' in e ? e.medium : null]),
      [
        ['BlockStored', 'STORAGE'],
        ['BlockStored', 'STORAGE'],
        ['BlockRemoved', 'STORAGE'],
      ],
    );
    const first = events[0];
    assert.ok(first?.type === 'BlockStored');
    assert.equal(first.parentBlockHash, null);
    assert.deepEqual(first.tokenIds, PROMPT.slice(0, 16));
    assert.equal(first.locality, 'LOCAL', "the tier's locality");
    const second = events[1];
    assert.ok(second?.type === 'BlockStored');
    assert.equal(second.parentBlockHash, first.blockHashes[0]);
  });

  test('secondary tier lookups answer null ("ask again") until known, then load asynchronously', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-offload-units-'));
    try {
      // Generous bounds: on a loaded machine a file read can take longer than the 200 ms default.
      const tier = new FsTier({ rootDir: dir, run: tinyRunLayout(), capacityBytes: null, timeoutMs: 5000 });
      const { s } = schedulerWith(
        {
          cpu_bytes_to_use: 1 << 22,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', root_dir: dir, timeout_ms: 5000 }],
        },
        [tier],
      );
      const keys = [0, 1, 2].map((c) => s.layout.chunkKeys(hashes(PROMPT), c)![0]!);
      await tier.putMany(keys.map((key) => ({ key, value: new Uint8Array(10) })));
      const req = request('s', PROMPT);
      assert.deepEqual(s.getNumNewMatchedTokens(req, 0), { count: null, loadAsync: false });
      const answer = await waitUntil('the tier lookup to answer', () => {
        const a = s.getNumNewMatchedTokens(req, 0);
        return a.count === null ? null : a;
      });
      assert.deepEqual(answer, { count: 48, loadAsync: true });
      s.updateStateAfterAlloc(req, blocksOf([1, 2, 3, 4, 5]), 48);
      const meta = s.buildConnectorMeta(output([]));
      assert.equal(meta.loads[0]?.async, true);
      assert.deepEqual(
        meta.loads[0]!.items.map((i) => i.source),
        [0, 0, 0],
      );
      assert.ok(
        meta.loads[0]!.items.every((i) => i.slot >= 0),
        'promotion goes through a CPU slot',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function reqWith(id: string, tokens: number[], params: Record<string, unknown>): ConnectorRequest {
  return { ...request(id, tokens), kvTransferParams: params };
}

function workerMeta(step: number, extra: Partial<Record<string, unknown>> = {}) {
  return {
    ...emptyConnectorOutput(),
    kvConnectorWorkerMeta: {
      [WORKER_META_KEY]: {
        step,
        promoted: [],
        failed: [],
        storedSecondary: [],
        evictedSecondary: [],
        ...extra,
      },
    },
  };
}

describe('KV events as vLLM emits them', () => {
  test('by default every offload event is the placeholder: the chunk hash, no tokens, block_size 0', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, blocks_per_chunk: 2 });
    const req = request('p', PROMPT);
    computeAndStore(s, req, [1, 2, 3, 4, 5]);
    const events = s.takeEvents();
    const hashes64 = req.blockHashes.map(externalBlockHash);
    assert.deepEqual(events, [
      {
        type: 'BlockStored',
        blockHashes: [hashes64[1]],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 0,
        groupIdx: 0,
        medium: 'CPU',
      },
      {
        type: 'BlockStored',
        blockHashes: [hashes64[3]],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 0,
        groupIdx: 0,
        medium: 'CPU',
      },
    ]);
    s.resetCache();
    assert.deepEqual(s.takeEvents(), [
      { type: 'BlockRemoved', blockHashes: [hashes64[1], hashes64[3]], groupIdx: 0, medium: 'CPU' },
    ]);
  });

  test('self-describing payloads live while any tier holds the chunk (reference-counted residencies)', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, self_describing_kv_events: true }, [], {
      tierInfo: [{ medium: 'STORAGE', locality: null, enableKvEvents: true }],
    });
    const req = request('rc', PROMPT.slice(0, 40));
    computeAndStore(s, req, [1, 2, 3]);
    const key = s.layout.chunkKeys(req.blockHashes, 1)![0]!;
    s.updateConnectorOutput(workerMeta(0, { storedSecondary: [{ tier: 0, keys: [key] }] }));
    s.takeEvents();
    const full = [externalBlockHash(req.blockHashes[1]!)];
    s.resetCache(); // the CPU copy goes; the STORAGE copy keeps the payload alive
    const cpuRemoved = s.takeEvents().find((e) => e.type === 'BlockRemoved');
    assert.ok(cpuRemoved?.type === 'BlockRemoved');
    assert.ok(cpuRemoved.blockHashes.includes(full[0]!));
    s.updateConnectorOutput(workerMeta(0, { evictedSecondary: [{ tier: 0, keys: [key] }] }));
    assert.deepEqual(s.takeEvents(), [
      { type: 'BlockRemoved', blockHashes: full, groupIdx: 0, medium: 'STORAGE' },
    ]);
    assert.equal(s.events.described, 0, 'no payload is kept once no tier holds the chunk');
  });

  test('a tier without enable_kv_events publishes nothing; locality is sent only when configured', () => {
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22 }, [], {
      tierInfo: [
        { medium: 'STORAGE', locality: 'REMOTE', enableKvEvents: false },
        { medium: 'STORAGE', locality: null, enableKvEvents: true },
      ],
    });
    const req = request('ev', PROMPT.slice(0, 40));
    computeAndStore(s, req, [1, 2, 3]);
    s.takeEvents();
    const key = s.layout.chunkKeys(req.blockHashes, 0)![0]!;
    s.updateConnectorOutput(
      workerMeta(0, {
        storedSecondary: [
          { tier: 0, keys: [key] },
          { tier: 1, keys: [key] },
        ],
      }),
    );
    const events = s.takeEvents();
    assert.equal(events.length, 1);
    assert.ok(events[0]?.type === 'BlockStored' && events[0].medium === 'STORAGE');
    assert.equal('locality' in events[0]!, false);
  });
});

describe('per-request kv_transfer_params', () => {
  test('max_offload_tokens caps what is stored; 0 stores nothing; a bad value is no cap', () => {
    const stores = (params: Record<string, unknown>) => {
      const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22 });
      return computeAndStore(s, reqWith('m', PROMPT, params), [1, 2, 3, 4, 5]);
    };
    assert.equal(stores({}), 4, 'four full chunks of 70 tokens');
    assert.equal(stores({ max_offload_tokens: 40 }), 2, 'the first 40 tokens: two full chunks');
    assert.equal(stores({ max_offload_tokens: 0 }), 0);
    for (const bad of [-1, 1.5, true, '32'])
      assert.equal(stores({ max_offload_tokens: bad }), 4, String(bad));
  });

  test('kv_load_tiers parses as vLLM parses it', () => {
    const fs = { medium: 'STORAGE', locality: 'LOCAL' } as const;
    const unspecified = { medium: 'STORAGE', locality: null } as const;
    const f = (raw: unknown) => parseLoadTierFilter(raw, 'r');
    assert.equal(f(undefined), LoadTierFilter.ALL);
    assert.equal(f({ medium: 'STORAGE' }), LoadTierFilter.ALL, 'not a list: every tier');
    assert.equal(f([]).allows(fs), false, '[]: no secondary tier');
    assert.equal(f([{ medium: 'storage' }]).allows(fs), true, 'case-insensitive');
    assert.equal(f([{ medium: 'CPU' }]).allows(fs), false);
    assert.equal(f([{ locality: 'REMOTE' }]).allows(fs), false);
    assert.equal(f([{ locality: 'REMOTE' }]).allows(unspecified), true, 'an unspecified locality matches');
    assert.equal(f([{ medium: 'TAPE' }, 'x']), LoadTierFilter.ALL, 'every entry invalid: every tier');
    assert.equal(f([{ medium: 'TAPE' }, { locality: 'LOCAL' }]).allows(fs), true, 'invalid entries skipped');
  });

  test('kv_load_tiers excludes secondary tiers from a load; the CPU tier is always used', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-offload-filter-'));
    try {
      const tier = new FsTier({ rootDir: dir, run: tinyRunLayout(), capacityBytes: null, timeoutMs: 5000 });
      const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22 }, [tier], {
        tierInfo: [{ medium: 'STORAGE', locality: 'LOCAL', enableKvEvents: false }],
      });
      const keys = [0, 1, 2].map((c) => s.layout.chunkKeys(hashes(PROMPT), c)![0]!);
      await tier.putMany(keys.map((key) => ({ key, value: new Uint8Array(10) })));
      const answer = (params: Record<string, unknown>, id: string) =>
        waitUntil(`the lookup of ${id}`, () => {
          const a = s.getNumNewMatchedTokens(reqWith(id, PROMPT, params), 0);
          return a.count === null ? null : { count: a.count };
        }).then((a) => a.count);
      assert.equal(await answer({}, 'all'), 48);
      assert.equal(await answer({ kv_load_tiers: [{ medium: 'STORAGE', locality: 'LOCAL' }] }, 'local'), 48);
      assert.equal(await answer({ kv_load_tiers: [{ locality: 'REMOTE' }] }, 'remote'), 0);
      assert.equal(await answer({ kv_load_tiers: [] }, 'none'), 0);
      const { s: s2 } = schedulerWith({ cpu_bytes_to_use: 1 << 22 });
      computeAndStore(s2, request('cpu', PROMPT), [1, 2, 3, 4, 5]);
      assert.equal(
        s2.getNumNewMatchedTokens(reqWith('cpu2', PROMPT, { kv_load_tiers: [] }), 0).count,
        64,
        'CPU hits ignore the filter',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('max_tracker_size bounds the store_threshold tracker', () => {
    const c = parse({ cpu_bytes_to_use: 1, store_threshold: 2, max_tracker_size: 3 });
    assert.equal(c.maxTrackerSize, 3);
    const { s } = schedulerWith({ cpu_bytes_to_use: 1 << 22, store_threshold: 2, max_tracker_size: 3 });
    assert.equal(s.tracker.maxSize, 3);
    for (const k of ['a', 'b', 'c', 'd']) s.tracker.record(k);
    assert.equal(s.tracker.size, 3);
    throwsKV(
      () => parse({ cpu_bytes_to_use: 1, max_tracker_size: 0 }),
      /max_tracker_size/,
      'kv_connector_extra_config.max_tracker_size',
    );
  });
});

test("the OffloadingConnector's tiers: CPU is host, fs is disk, a peer is p2p, remote stores unspecified", () => {
  assert.deepEqual(['cpu', 'fs', 'p2p', 'redis', 'obj', 'MyTier'].map(tierCacheHitSource), [
    'host',
    'disk',
    'p2p',
    'external_unspecified',
    'external_unspecified',
    'external_unspecified',
  ]);
});

test('CpuSlotIndex.numBusy: slots being written or pinned by a load (the CPU cache usage gauge)', () => {
  const index = new CpuSlotIndex(4, 'lru');
  assert.ok(index.allocate('a') && index.allocate('b'));
  assert.equal(index.numBusy(), 2, 'both pending their write');
  index.markReady('a');
  index.markReady('b');
  assert.equal(index.numBusy(), 0);
  index.pin('a');
  assert.equal(index.numBusy(), 1, 'pinned by a load');
  index.unpin('a');
  assert.equal(index.numBusy(), 0);
});
