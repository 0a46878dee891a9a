import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';
import { runCli } from '../../../src/cli/program.ts';
import { clipToWindows, pairByPosition, pairSubBlocks } from '../../../src/connector/block-lists.ts';
import {
  computeTpMapping,
  consumersPerProducer,
  handshakeTargetRanks,
  LeaseHeap,
  parseNixlOptions,
  reduceNixlStats,
  tpRatio,
} from '../../../src/connectors/nixl/index.ts';
import {
  completionNotification,
  HEARTBEAT_PREFIX,
  heartbeatMessages,
  type NotificationHandlers,
  pushNackNotification,
  pushRegistrationNotification,
  routeNotification,
} from '../../../src/connectors/nixl/notifications.ts';
import { ProducerLeases } from '../../../src/connectors/nixl/producer-leases.ts';
import { readRetryDelayMs, shouldReconnect } from '../../../src/connectors/nixl/retry-policy.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { isKVError } from '../../../src/errors/index.ts';
import type { KVCacheConfig } from '../../../src/kv/interfaces.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import type { TransferAgent, TransferFailureCause, TransferStatus } from '../../../src/transfer/index.ts';

describe('tp mapping (heterogeneous TP, pure)', () => {
  it('ratios, target ranks and notification counts', () => {
    assert.equal(tpRatio(1, 1), 1);
    assert.equal(tpRatio(4, 2), 2);
    assert.equal(tpRatio(2, 4), -2);
    assert.throws(
      () => tpRatio(3, 2),
      /Local tensor parallel size 3 is not divisible by remote tensor parallel size 2\./,
    );
    assert.throws(
      () => tpRatio(2, 3),
      /Remote tensor parallel size 3 is not divisible by local tensor parallel size 2\./,
    );
    assert.deepEqual(handshakeTargetRanks(4, 3, 2), [1]);
    assert.deepEqual(handshakeTargetRanks(1, 0, 4), [0, 1, 2, 3]);
    assert.equal(consumersPerProducer(2, 4), 2);
    assert.equal(consumersPerProducer(4, 2), 1);
  });

  it('D TP > P TP reads a head slice; P TP > D TP reads several ranks deduplicated by KV head', () => {
    assert.deepEqual(computeTpMapping({ localTp: 4, tpRank: 3, remoteTp: 2, totalKvHeads: 8 }), {
      sourceRanks: [1],
      rankOffsetFactor: 1,
      headFraction: 0.5,
    });
    // 2 KV heads over 4 producer ranks: ranks 0,1 share head 0 and 2,3 share head 1.
    assert.deepEqual(
      computeTpMapping({ localTp: 1, tpRank: 0, remoteTp: 4, totalKvHeads: 2 }).sourceRanks,
      [0, 2],
    );
    assert.equal(
      computeTpMapping({ localTp: 8, tpRank: 7, remoteTp: 2, totalKvHeads: 4 }).rankOffsetFactor,
      1,
    );
  });
});

describe('lease heap', () => {
  it('reaps by expiry, not insertion order; renewals extend and never block later expiries (#58222)', () => {
    const h = new LeaseHeap();
    h.set('a', 100);
    h.set('b', 200);
    h.set('c', 150);
    assert.equal(h.set('a', 50, false), 100, 'a heartbeat never shortens');
    h.set('a', 1000, false);
    assert.deepEqual(h.popExpired(300), ['c', 'b']);
    assert.deepEqual(h.popExpired(999), []);
    assert.deepEqual(h.popExpired(1000), ['a']);
    assert.equal(h.size, 0);
  });
});

describe('block lists', () => {
  const cfg = {
    numBlocks: 64,
    tensors: [],
    groups: [
      {
        layerNames: ['l0'],
        spec: {
          kind: 'full_attention',
          blockSize: 16,
          numKvHeads: 2,
          headSize: 32,
          dtype: 'float32',
          slidingWindow: null,
          pageSizeBytes: 0,
        },
      },
      {
        layerNames: ['l1'],
        spec: {
          kind: 'sliding_window',
          blockSize: 16,
          numKvHeads: 2,
          headSize: 32,
          dtype: 'float32',
          slidingWindow: 32,
          pageSizeBytes: 0,
        },
      },
    ],
  } as unknown as KVCacheConfig;

  it('sliding-window groups keep the last cdiv(window, block_size) + 1 blocks', () => {
    assert.deepEqual(
      clipToWindows(cfg, [
        [1, 2, 3, 4, 5],
        [0, 6, 7, 8, 9],
      ]),
      [
        [1, 2, 3, 4, 5],
        [7, 8, 9],
      ],
    );
  });

  it('pairs by token position: a local prefix hit trims the remote list at the front', () => {
    const local = [{ positions: [2, 3], ids: [40, 41] }];
    const remote = [{ positions: [0, 1, 2, 3], ids: [10, 11, 12, 13] }];
    assert.deepEqual(pairByPosition(local, remote), { local: [[40, 41]], remote: [[12, 13]] });
  });

  it('pairs smaller remote blocks into the sub-blocks of the local block holding their tokens', () => {
    const local = [{ positions: [1, 2], ids: [40, 41] }];
    // ratio 2: remote block q holds the tokens of local block q / 2, sub-block q % 2; id 0 is null.
    const remote = [{ positions: [0, 1, 2, 3, 4, 5], ids: [10, 11, 12, 0, 14, 15] }];
    assert.deepEqual(pairSubBlocks(local, remote, 2), {
      local: [[40, 41, 41]],
      remote: [[12, 14, 15]],
      sub: [[0, 0, 1]],
    });
  });
});

describe('options and startup', () => {
  it('validates backends, resolves env defaults', () => {
    const o = parseNixlOptions({}, null, {});
    assert.equal(o.sideChannelHost, '127.0.0.1');
    assert.equal(o.sideChannelPort, 5600);
    assert.equal(o.kvLeaseDuration, 30);
    assert.deepEqual(o.backends, ['UCX']);
    assert.equal(parseNixlOptions({}, null, { VLLM_NIXL_SIDE_CHANNEL_PORT: '7000' }).sideChannelPort, 7000);
    assert.throws(
      () => parseNixlOptions({ backends: ['RDMA'] }, null, {}),
      /Unknown NIXL backend 'RDMA'\. Available backends: TCP, SHM, UCX/,
    );
    assert.throws(
      () => parseNixlOptions({ kv_lease_duration: -1 }, null, {}),
      (e: unknown) => isKVError(e) && e.field === 'kv_connector_extra_config.kv_lease_duration',
    );
  });

  it('busy_poll_us: unset leaves the agent its default; whole µs from 0 to 100000', () => {
    assert.equal(parseNixlOptions({}, null, {}).busyPollUs, undefined);
    assert.equal(parseNixlOptions({ busy_poll_us: 0 }, null, {}).busyPollUs, 0);
    assert.equal(parseNixlOptions({ busy_poll_us: 250 }, null, {}).busyPollUs, 250);
    for (const bad of [-1, 100_001, 1.5, 'fast']) {
      assert.throws(
        () => parseNixlOptions({ busy_poll_us: bad }, null, {}),
        (e: unknown) => isKVError(e) && e.field === 'kv_connector_extra_config.busy_poll_us',
        `busy_poll_us ${JSON.stringify(bad)}`,
      );
    }
  });

  it('a side-channel port in use fails at startup naming both ways to change it', async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const port = (blocker.address() as { port: number }).port;
    try {
      await assert.rejects(
        LLM.create({
          model: 'tiny',
          num_gpu_blocks: 16,
          max_model_len: 128,
          kvTransferConfig: {
            kv_connector: 'NixlConnector',
            kv_role: 'kv_producer',
            kv_connector_extra_config: { side_channel_port: port },
          },
        }),
        (e: unknown) =>
          isKVError(e) &&
          /already in use/.test(e.message) &&
          /VLLM_NIXL_SIDE_CHANNEL_PORT/.test(e.hint ?? '') &&
          /side_channel_port/.test(e.hint ?? ''),
      );
    } finally {
      await new Promise((r) => blocker.close(r));
    }
  });

  it("kv_role='kv_both' logs vLLM's deprecation warning", async () => {
    const { result: llm, records } = await captureLogs(() =>
      LLM.create({
        model: 'tiny',
        num_gpu_blocks: 16,
        max_model_len: 128,
        kvTransferConfig: {
          kv_connector: 'NixlConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { side_channel_port: 0 },
        },
      }),
    );
    await llm.shutdown();
    assert.ok(
      records.some((r) => r.message.startsWith("Using kv_role='kv_both' with NixlConnector is deprecated")),
    );
  });

  it('reduce() summarises stats as vLLM logs them', () => {
    const r = reduceNixlStats({
      transfer_duration: [0.001, 0.003],
      wire_duration: [0.001, 0.003],
      post_duration: [0, 0],
      bytes_transferred: [1e6, 3e6],
      num_descriptors: [2, 4],
      num_failed_transfers: 0,
      num_failed_notifications: 0,
      num_kv_expired_reqs: 0,
      num_failed_handshakes: 0,
      num_notifications_after_expiry: 0,
    });
    assert.equal(r['Num successful transfers'], 2);
    assert.equal(r['Avg xfer time (ms)'], 2);
    assert.equal(r['Avg MB per transfer'], 2);
    assert.equal(r['Throughput (MB/s)'], 1000);
  });
});

describe('expired-request accounting', () => {
  it("a completion after the lease expired counts as vLLM's num_notifications_after_expiry", () => {
    const calls: string[] = [];
    const agent = {
      grantRead: (id: string) => calls.push(`grant ${id}`),
      renewGrant: () => {},
      revokeGrant: (id: string) => calls.push(`revoke ${id}`),
    } as unknown as TransferAgent;
    const leases = new ProducerLeases(agent, 0.05, 1);
    leases.add({ reqId: 'r1', blocks: [{ positions: [0], ids: [3] }], leaseSeconds: 0.05 });
    leases.expire(Date.now() + 1000);
    assert.deepEqual(calls, ['grant r1', 'revoke r1']);
    assert.equal(leases.takeExpiredCount(), 1);
    leases.completion('r1', 1);
    leases.completion('never-seen', 1);
    assert.equal(leases.takeAfterExpiryCount(), 1, 'only the expired request counts');
    assert.equal(leases.takeAfterExpiryCount(), 0, 'taken once');
  });
});

describe('heartbeat notifications', () => {
  it('split a long list of request ids into messages the transfer agent accepts, losing none', () => {
    const ids = Array.from({ length: 300 }, (_, i) => `cmpl-${'x'.repeat(36)}-${i}`);
    const messages = heartbeatMessages(ids);
    assert.ok(messages.length > 1, 'more than one message for 300 ids');
    for (const m of messages) {
      assert.ok(m.startsWith(HEARTBEAT_PREFIX));
      assert.ok(m.length <= 4096, `${m.length} chars`);
    }
    assert.deepEqual(
      messages.flatMap((m) => m.slice(HEARTBEAT_PREFIX.length).split(',')),
      ids,
    );
    assert.deepEqual(heartbeatMessages([]), []);
    assert.deepEqual(heartbeatMessages(['a']), [`${HEARTBEAT_PREFIX}a`]);
  });
});

describe('notifications: every format written by one builder is read back by the router', () => {
  function routed(message: string): string[] {
    const seen: string[] = [];
    const to: NotificationHandlers = {
      heartbeat: (ids) => seen.push(`heartbeat ${ids.join('|')}`),
      registration: (json) => seen.push(`registration ${JSON.parse(json).request_id}`),
      nack: (reqId, ids) => seen.push(`nack ${reqId} [${ids.join(',')}]`),
      completion: (reqId, worldSize) => seen.push(`completion ${reqId} ${worldSize}`),
      unknown: (n) => seen.push(`unknown ${n.message}`),
    };
    routeNotification({ agent: 'P-rank0', message }, to);
    return seen;
  }

  it('completion, heartbeat, push registration and nack, and anything else', () => {
    assert.deepEqual(routed(completionNotification('cmpl-a:b', 2)), ['completion cmpl-a:b 2']);
    assert.deepEqual(routed(heartbeatMessages(['r1', 'r2'])[0]!), ['heartbeat r1|r2']);
    const registration = {
      request_id: 'cmpl-9',
      remote_request_id: null,
      decode_engine_id: 'D',
      decode_host: '127.0.0.1',
      decode_port: 5600,
      decode_tp_size: 1,
      blocks: [],
    };
    assert.deepEqual(routed(pushRegistrationNotification(registration)), ['registration cmpl-9']);
    assert.deepEqual(routed(pushNackNotification('cmpl-9', [3, 4])), ['nack cmpl-9 [3,4]']);
    assert.deepEqual(routed(pushNackNotification('cmpl-9', [])), ['nack cmpl-9 []']);
    assert.deepEqual(routed('hello'), ['unknown hello']);
    assert.deepEqual(routed('r:0'), ['unknown r:0'], 'a completion counts at least one rank');
  });
});

describe('retry policy: decided on the failure cause, whatever its wording', () => {
  const failed = (cause: TransferFailureCause, reason: string): TransferStatus => ({
    state: 'ERR',
    failed: [],
    failedBlockIds: [],
    cause,
    reason,
  });

  it('retries a grant not there yet with a growing backoff inside the lease, and nothing else', () => {
    const notYet = failed('not_granted_yet', 'the owner says: come back later');
    assert.equal(readRetryDelayMs(notYet, 0, 0, 30_000, 0), 50);
    assert.equal(readRetryDelayMs(notYet, 3, 0, 30_000, 0), 400);
    assert.equal(readRetryDelayMs(notYet, 10, 0, 30_000, 0), 1000, 'capped');
    assert.equal(readRetryDelayMs(notYet, 0, 0, 30_000, 29_990), null, 'past the lease');
    assert.equal(readRetryDelayMs(failed('grant_quota', 'busy'), 0, 0, 30_000, 0), 50);
    const endedInRetryableWords = failed('grant_ended', "READ refused: no read grant 'k' yet (waited 5 ms)");
    assert.equal(readRetryDelayMs(endedInRetryableWords, 0, 0, 30_000, 0), null);
  });

  it('reconnects once after a lost connection, and not for a failure worded like one', () => {
    assert.equal(shouldReconnect(failed('connection_lost', 'gone'), false), true);
    assert.equal(shouldReconnect(failed('connection_lost', 'gone'), true), false, 'once');
    assert.equal(
      shouldReconnect(failed('send_failed', 'connection to P-rank0 lost: socket hang up'), false),
      false,
    );
  });
});

describe('bidirectional_kv_xfer options and vLLM examples', () => {
  const check = async (config: Record<string, unknown>) => {
    let out = '';
    let err = '';
    const code = await runCli(['check-config', '--kv-transfer-config', JSON.stringify(config)], {
      out: (t) => {
        out += t;
      },
      err: (t) => {
        err += t;
      },
    });
    return { code, out, err };
  };

  it("defaults as vLLM's: TTL 480 s; the recompute threshold 64 when bidirectional, else 0", () => {
    const off = parseNixlOptions({}, null, {});
    assert.deepEqual(
      [off.bidirectionalKvXfer, off.decoderKvBlocksTtl, off.kvRecomputeThreshold],
      [false, 480, 0],
    );
    const on = parseNixlOptions({ bidirectional_kv_xfer: 'True' }, null, {});
    assert.deepEqual([on.bidirectionalKvXfer, on.kvRecomputeThreshold], [true, 64]);
    assert.equal(
      parseNixlOptions({ bidirectional_kv_xfer: true, kv_recompute_threshold: 0 }, null, {})
        .kvRecomputeThreshold,
      0,
    );
    assert.throws(
      () => parseNixlOptions({ decoder_kv_blocks_ttl: 0 }, null, {}),
      (e: unknown) => isKVError(e) && e.field === 'kv_connector_extra_config.decoder_kv_blocks_ttl',
    );
  });

  it("check-config accepts vLLM's documented bidirectional configs; push refuses it naming the field", async () => {
    for (const extra of [
      { decoder_kv_blocks_ttl: 600 },
      {
        bidirectional_kv_xfer: true,
        kv_recompute_threshold: 0,
        decoder_kv_blocks_ttl: 480,
        enable_cross_layers_blocks: 'True',
      },
    ]) {
      for (const role of ['kv_producer', 'kv_consumer']) {
        const r = await check({
          kv_connector: 'NixlConnector',
          kv_role: role,
          kv_connector_extra_config: extra,
        });
        assert.equal(r.code, 0, r.err);
      }
    }
    const push = await check({
      kv_connector: 'NixlPushConnector',
      kv_role: 'kv_producer',
      kv_connector_extra_config: { bidirectional_kv_xfer: true },
    });
    assert.equal(push.code, 2);
    assert.match(push.err, /Bidirectional KV transfer is not supported for NIXL push connector\./);
    assert.match(push.err, /kv_connector_extra_config\.bidirectional_kv_xfer/);
    assert.match(push.err, /expected false with NixlPushConnector, received true/);
  });
});
