import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isKVError } from '../../src/errors/index.ts';
import { captureLogs, setLogLevel } from '../../src/logging/logger.ts';
import {
  encodePrefixAndHeader,
  FRAME_MAGIC,
  FrameDecoder,
  FramingError,
  MAX_PAYLOAD_BYTES,
} from '../../src/transfer/frame-codec.ts';
import {
  checkCompatibility,
  coalesceBlockLists,
  compatibilityMismatchMessage,
  InThreadTransferAgent,
  resolveBackends,
} from '../../src/transfer/index.ts';
import { mappedPieces, parseAgentFrame } from '../../src/transfer/messages.ts';
import { ProtocolError } from '../../src/transfer/protocol-error.ts';
import { makeRegion } from './helpers/pattern.ts';

setLogLevel('silent');

type TestHeader = { readonly type: string; readonly s?: unknown };

function collect() {
  const frames: { header: TestHeader; payload: Buffer | null }[] = [];
  const decoder = new FrameDecoder<TestHeader>(
    {
      destination: (_h, len) => (len > 0 ? new Uint8Array(len) : null),
      frame: (header, payload) => frames.push({ header, payload: payload ? Buffer.from(payload) : null }),
    },
    (raw) => raw as TestHeader,
  );
  return { frames, decoder };
}

describe('framing', () => {
  it('decodes frames split at arbitrary points', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.string({ maxLength: 40 }), fc.uint8Array({ maxLength: 300 })), {
          minLength: 1,
          maxLength: 6,
        }),
        fc.array(fc.integer({ min: 1, max: 64 }), { minLength: 1, maxLength: 20 }),
        (msgs, cuts) => {
          const wire = Buffer.concat(
            msgs.flatMap(([s, p]) => [
              encodePrefixAndHeader({ type: 'm', s } as TestHeader, p.length),
              Buffer.from(p),
            ]),
          );
          const { frames, decoder } = collect();
          let pos = 0;
          let i = 0;
          while (pos < wire.length) {
            const n = cuts[i++ % cuts.length]!;
            decoder.push(wire.subarray(pos, pos + n));
            pos += n;
          }
          assert.equal(frames.length, msgs.length);
          frames.forEach((f, k) => {
            assert.equal(f.header.s, msgs[k]![0]);
            assert.deepEqual(f.payload ?? Buffer.alloc(0), Buffer.from(msgs[k]![1]));
          });
        },
      ),
    );
  });

  it('rejects bad magic, bad version and oversize lengths before allocating', () => {
    const good = encodePrefixAndHeader({ type: 'x' }, 0);
    const badMagic = Buffer.from(good);
    badMagic.writeUInt32BE(0xdeadbeef, 0);
    const badVersion = Buffer.from(good);
    badVersion.writeUInt16BE(9, 4);
    const hugeHeader = Buffer.from(good);
    hugeHeader.writeUInt32BE(0xffffffff, 8);
    const hugePayload = Buffer.from(good);
    hugePayload.writeUInt32BE(MAX_PAYLOAD_BYTES + 1, 12);
    for (const [wire, re] of [
      [badMagic, /bad magic/],
      [badVersion, /version 9/],
      [hugeHeader, /header length/],
      [hugePayload, /exceeds/],
    ] as const) {
      assert.throws(
        () => collect().decoder.push(wire),
        (e: unknown) => e instanceof FramingError && re.test(e.message),
      );
    }
    assert.equal(good.readUInt32BE(0), FRAME_MAGIC);
  });
});

describe('helpers', () => {
  it('coalesces block lists into runs contiguous on both sides', () => {
    const d = coalesceBlockLists([
      {
        localRegion: 0,
        localBlockIds: [1, 2, 3, 7, 8, 9],
        remoteRegion: 2,
        remoteBlockIds: [10, 11, 13, 14, 15, 20],
      },
    ]);
    assert.deepEqual(
      d.map((x) => [x.localFirst, x.remoteFirst, x.count]),
      [
        [1, 10, 2],
        [3, 13, 1],
        [7, 14, 2],
        [9, 20, 1],
      ],
    );
    assert.throws(() =>
      coalesceBlockLists([{ localRegion: 0, localBlockIds: [1], remoteRegion: 0, remoteBlockIds: [] }]),
    );
  });

  it('resolves backend names as vLLM users write them', () => {
    assert.deepEqual(resolveBackends(undefined), { tcp: true, shm: true, preferShm: true });
    assert.deepEqual(resolveBackends(['tcp']), { tcp: true, shm: false, preferShm: false });
    assert.deepEqual(resolveBackends(['SHM']), { tcp: false, shm: true, preferShm: true });
    assert.throws(
      () => resolveBackends(['GDS']),
      (e: unknown) =>
        isKVError(e) && e.code === 'TRANSFER_UNKNOWN_BACKEND' && /TCP, SHM, UCX/.test(e.message),
    );
  });

  it('produces vLLM’s exact compatibility mismatch text', () => {
    const msg = compatibilityMismatchMessage('aaa', 'bbb');
    assert.ok(
      msg.startsWith('NIXL compatibility hash mismatch. Local: aaa, Remote: bbb. Prefill and decode'),
    );
    assert.ok(msg.includes('identical configurations.Disable this check using --kv-transfer-config'));
    assert.ok(msg.endsWith(`'{"kv_connector_extra_config": {"enforce_handshake_compat": false}}'`));
    assert.throws(
      () => checkCompatibility('a', 'b'),
      (e: unknown) => isKVError(e) && e.message === compatibilityMismatchMessage('a', 'b'),
    );
    checkCompatibility('a', 'b', false);
    checkCompatibility('a', 'a');
  });
});

describe('mapped frames (same-host pieces of mapped KV)', () => {
  it('parse, and stand for one data frame per part with its slice of the checksums', () => {
    const f = parseAgentFrame({
      type: 'mapped',
      xfer: 7,
      parts: [
        [0, 0, 2, 3, 0],
        [1, 4, 1, 5, 65536],
      ],
      sums: [11, 12, 13],
      held: 250,
    });
    assert.equal(f.type, 'mapped');
    if (f.type !== 'mapped') return;
    assert.deepEqual(mappedPieces(f), [
      {
        held: 250,
        type: 'data',
        xfer: 7,
        run: 0,
        block: 0,
        count: 2,
        sums: [11, 12],
        src: { region: 3, offset: 0 },
      },
      { type: 'data', xfer: 7, run: 1, block: 4, count: 1, sums: [13], src: { region: 5, offset: 65536 } },
    ]);
  });

  it('reject checksums that do not match the parts, empty parts and malformed tuples', () => {
    const bad: Record<string, unknown>[] = [
      { type: 'mapped', xfer: 1, parts: [[0, 0, 2, 0, 0]], sums: [1] },
      { type: 'mapped', xfer: 1, parts: [[0, 0, 0, 0, 0]], sums: [] },
      { type: 'mapped', xfer: 1, parts: [], sums: [] },
      { type: 'mapped', xfer: 1, parts: [[0, 0, 1, 0]], sums: [1] },
      { type: 'mapped', xfer: 1, parts: [[0, 0, 1, 0, -4096]], sums: [1] },
      { type: 'mapped', parts: [[0, 0, 1, 0, 0]], sums: [1] },
    ];
    for (const raw of bad) assert.throws(() => parseAgentFrame(raw), ProtocolError, JSON.stringify(raw));
  });

  it('a data frame on the wire never names mapped memory (src is not read from the wire)', () => {
    const f = parseAgentFrame({
      type: 'data',
      xfer: 1,
      run: 0,
      block: 0,
      count: 1,
      sums: [5],
      src: { region: 0, offset: 0 },
    });
    assert.equal(f.type === 'data' ? f.src : 'not data', undefined);
  });
});

describe('malformed frames on a real socket', () => {
  it('closes only the offending connection, logs it, and keeps serving other peers', async () => {
    const a = await InThreadTransferAgent.create({ engineId: 'A', backends: ['TCP'] });
    const b = await InThreadTransferAgent.create({ engineId: 'B', backends: ['TCP'], connectTimeoutMs: 400 });
    a.registerMemory([makeRegion(0, 1024, 16, 1)]);
    b.registerMemory([makeRegion(0, 1024, 16, 2)]);
    b.grantRead('g', { blockIds: [1, 2] });
    const remote = a.addRemoteAgent(b.metadata());
    const { port } = b.metadata().endpoints.tcp;
    const bodies: Buffer[] = [
      randomBytes(64),
      Buffer.concat([
        encodePrefixAndHeader({ type: 'x' }, 0).subarray(0, 8),
        Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]),
      ]),
      (() => {
        const f = encodePrefixAndHeader({ type: 'hello' }, 0);
        f.writeUInt16BE(77, 4);
        return f;
      })(),
      Buffer.concat([encodePrefixAndHeader({ type: 'read', xfer: 1 } as { type: string }, 0)]), // before the handshake
      (() => {
        const f = Buffer.from(encodePrefixAndHeader({ type: 'q' }, 0));
        f.fill(0x7b, 16);
        return f;
      })(),
      ...Array.from({ length: 6 }, () => randomBytes(16 + Math.floor(Math.random() * 2000))),
      randomBytes(5), // a partial prefix: dropped by the handshake timeout
    ];
    const { records } = await captureLogs(async () => {
      for (const body of bodies) {
        const closed = await new Promise<boolean>((resolve) => {
          const s = connect({ host: '127.0.0.1', port }, () => s.write(body));
          s.on('data', () => {});
          s.on('error', () => {});
          s.on('close', () => resolve(true));
          setTimeout(() => {
            s.destroy();
            resolve(false);
          }, 2000).unref();
        });
        assert.ok(closed, `server must close a connection that sent ${body.subarray(0, 16).toString('hex')}`);
        const h = a.read(remote, [
          { localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 2 },
        ]);
        assert.equal((await a.waitFor(h)).state, 'DONE', 'the server still serves well-behaved peers');
      }
    });
    assert.ok(
      records.filter((r) => r.level === 'warn' && /closing connection/.test(r.message)).length >=
        bodies.length,
    );
    await Promise.all([a.close(), b.close()]);
  });
});
