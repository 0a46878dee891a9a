/**
 * The OffloadingConnector's fs tier on a filesystem that fails, for real:
 *  - full: a 160 KiB tmpfs (ENOSPC part-way through a store);
 *  - EACCES: files and directories the engine may not read or write, for a process running
 *    as root without CAP_DAC_OVERRIDE (setpriv), so the permission bits apply;
 *  - EIO: an ext4 image on a loop device whose backing file is cut short under the mounted
 *    filesystem (`losetup -c`), so reading the chunk files' blocks fails in the block layer.
 * Every request must finish with the plain engine's tokens under kv_load_failure_policy=fail
 * (a warning and a miss, never a load error, a crash or a corrupt load).
 * Each test needs root and its capability (tmpfs, setpriv, loop); skipped otherwise, and a
 * failure under KVCONNECT_EXPECT_<CAPABILITY>=1 or KVCONNECT_EXPECT_PRIVILEGED=1 (CI).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import type { LLMOptions } from '../../src/engine/llm.ts';
import { type LogRecord, onLog } from '../../src/logging/logger.ts';
import { plainTokens, run, tieredEngineOptions } from '../connectors/offloading/helpers.ts';
import { skipUnless } from '../helpers/capabilities.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { EngineChild } from './helpers/engine-child.ts';

const prompt = (n: number) => Array.from({ length: 64 }, (_, i) => (i * 5 + n * 41 + 9) % 256);
/** One chunk file: 16 tokens of tiny's KV (32 KiB) plus the 16-byte frame header. */
const CHUNK_FILE_BYTES = 32 * 1024 + 16;
const FULL_HIT_TOKENS = 48;

const cleanups: (() => void)[] = [];
after(() => {
  for (const c of cleanups.splice(0).reverse()) {
    try {
      c();
    } catch {}
  }
});

function scratch(name: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `kvconnect-${name}-`));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function options(dir: string): LLMOptions {
  return tieredEngineOptions({ type: 'fs', root_dir: dir, timeout_ms: 5000 }, 'fail') as LLMOptions;
}

/** The tier's chunk files and temp files (`<root>/<run>_r0/hhh/hh_gN/*`). */
function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.bin') || f.endsWith('.tmp'))
    .map((f) => path.join(dir, f));
}

/** Every directory below `dir`. */
function dirs(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((f) => path.join(dir, f))
    .filter((p) => statSync(p).isDirectory());
}

/** Collects warnings of this process while `fn` runs. */
async function warnings<T>(fn: () => Promise<T>): Promise<{ result: T; warned: LogRecord[] }> {
  const warned: LogRecord[] = [];
  const off = onLog((r) => {
    if (r.level === 'warn') warned.push(r);
  });
  try {
    return { result: await fn(), warned };
  } finally {
    off();
  }
}

async function expectPlain(engine: AsyncEngine, p: number[], id: string): Promise<number> {
  const out = await run(engine, p, id);
  assert.equal(out.last.error, undefined, `${id}: no error`);
  assert.deepEqual(out.tokens, await plainTokens('tiny', p), `${id}: the plain engine's tokens`);
  return out.last.metrics.numExternalTokens;
}

async function withEngine<T>(dir: string, fn: (e: AsyncEngine) => Promise<T>): Promise<T> {
  const e = await AsyncEngine.create(options(dir));
  try {
    const result = await fn(e);
    await e.waitIdle();
    return result;
  } finally {
    await e.shutdown();
  }
}

describe('fs tier on a failing filesystem', () => {
  it('a full filesystem (tmpfs of 160 KiB): stores that do not fit are skipped with a warning, never half-written', {
    skip: skipUnless('tmpfs'),
  }, async () => {
    const dir = scratch('full');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=160k', 'tmpfs', dir]);
    cleanups.push(() => execFileSync('umount', ['-l', dir]));
    const { warned } = await warnings(() =>
      withEngine(dir, async (e) => {
        for (let i = 0; i < 4; i++) await expectPlain(e, prompt(i), `store-${i}`);
      }),
    );
    assert.ok(
      warned.some((w) => /fs tier .* is unavailable \(.*ENOSPC/.test(w.message)),
      'ENOSPC is logged as an outage',
    );
    const stored = files(dir);
    assert.ok(stored.length >= 4, 'what fitted was stored');
    assert.equal(stored.filter((f) => f.endsWith('.tmp')).length, 0, 'no half-written temp file is left');
    for (const f of stored) assert.equal(statSync(f).size, CHUNK_FILE_BYTES, `${f} is whole`);

    const hits = await withEngine(dir, async (e) => {
      let n = 0;
      for (let i = 0; i < 4; i++) n += await expectPlain(e, prompt(i), `load-${i}`);
      return n;
    });
    assert.ok(hits >= FULL_HIT_TOKENS, 'the chunks that were stored are loaded');

    for (const f of stored) rmSync(f);
    await withEngine(dir, async (e) => {
      await expectPlain(e, prompt(10), 'after-space-freed');
      await waitUntil('the store to land once there is room', () => files(dir).length > 0);
    });
  });

  it('EACCES for a process without CAP_DAC_OVERRIDE: unreadable files and an unwritable directory are misses', {
    skip: skipUnless('setpriv'),
  }, async () => {
    const dir = scratch('eacces');
    await withEngine(dir, (e) => expectPlain(e, prompt(20), 'stored'));
    await waitUntil('the chunk files', () => files(dir).length >= 4);
    for (const f of files(dir)) chmodSync(f, 0o000);
    for (const sub of dirs(dir)) chmodSync(sub, 0o555);
    chmodSync(dir, 0o555);
    cleanups.push(() => chmodSync(dir, 0o755));
    const child = await new EngineChild(options(dir), (argv) =>
      spawn('setpriv', ['--bounding-set', '-dac_override,-dac_read_search', ...argv], {
        stdio: ['pipe', 'pipe', 'inherit'],
      }),
    ).ready();
    try {
      for (const [p, id] of [
        [prompt(20), 'unreadable'],
        [prompt(21), 'unwritable'],
      ] as const) {
        const out = await child.generate(p, 6);
        assert.equal(out.finishReason, 'length', `${id}: finished, not failed`);
        assert.deepEqual(out.tokenIds, await plainTokens('tiny', p), `${id}: the plain engine's tokens`);
      }
      const logs = await child.logs();
      assert.ok(
        logs.some((l) => /fs tier .* is unavailable \(.*EACCES/.test(l.message)),
        `EACCES is logged: ${JSON.stringify(logs.map((l) => l.message))}`,
      );
      assert.ok(!logs.some((l) => /KV load failure/.test(l.message)), 'no load error: a miss');
      assert.equal(files(dir).length, 4, 'nothing was written');
    } finally {
      await child.kill();
    }
  });

  it('EIO: chunk files on a loop device cut short under the mounted ext4 are misses', {
    skip: skipUnless('loop'),
  }, async () => {
    const base = scratch('eio');
    const image = path.join(base, 'disk.img');
    const mnt = path.join(base, 'mnt');
    mkdirSync(mnt);
    execFileSync('truncate', ['-s', '64M', image]);
    execFileSync('mkfs.ext4', ['-q', '-F', image]);
    const loop = execFileSync('losetup', ['-f', '--show', image], { encoding: 'utf8' }).trim();
    cleanups.push(() => execFileSync('losetup', ['-d', loop]));
    execFileSync('mount', [loop, mnt]);
    cleanups.push(() => execFileSync('umount', ['-l', mnt]));
    const dir = path.join(mnt, 'tier');
    // Something first, so the chunk files land past the first megabyte.
    execFileSync('dd', ['if=/dev/zero', `of=${path.join(mnt, 'filler')}`, 'bs=1M', 'count=4', 'status=none']);
    await withEngine(dir, (e) => expectPlain(e, prompt(30), 'stored'));
    await waitUntil('the chunk files', () => files(dir).length >= 4);
    execFileSync('sync', ['-f', mnt]);
    for (const f of files(dir)) execFileSync('dd', [`if=${f}`, 'iflag=nocache', 'count=0', 'status=none']);
    execFileSync('truncate', ['-s', '1M', image]);
    execFileSync('losetup', ['-c', loop]);
    const { result: external, warned } = await warnings(() =>
      withEngine(dir, (e) => expectPlain(e, prompt(30), 'load-after-eio')),
    );
    assert.equal(external, 0, 'nothing was loaded from the failing disk');
    assert.ok(
      warned.some((w) => /fs tier .* is unavailable \(.*(EIO|i\/o error)/i.test(w.message)),
      `EIO is logged: ${JSON.stringify(warned.map((w) => w.message))}`,
    );
  });
});
