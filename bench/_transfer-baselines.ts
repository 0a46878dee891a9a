/**
 * The baselines `npm run bench -- transfer` measures in the same run as kvconnect: UCX
 * (NIXL's own backend) `ucp_put_bw` over posix shared memory and over tcp on loopback (and
 * its `tag_lat` ping-pong for one-block latency),
 * iperf3 single stream, and a native libc memcpy (the addon's copyBytes, not
 * TypedArray.set). Each returns GB/s for one sample, or null with a note when its tool is
 * missing; a missing tool is never a silent 0.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { copyAndChecksum, copyAndChecksumRuns } from '../src/transfer/checksum.ts';
import type { NativeCopy } from '../src/transfer/copy-bytes.ts';
import { nativeFunctions } from '../src/util/native-addon.ts';
import { allocateShared } from '../src/util/shared-memory.ts';

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const addr = s.address();
  await new Promise<void>((r) => s.close(() => r()));
  return typeof addr === 'object' && addr ? addr.port : 0;
}

function installed(cmd: string, versionFlag: string): boolean {
  const r = spawnSync(cmd, [versionFlag], { encoding: 'utf8' });
  return r.error === undefined;
}

/**
 * Runs a two-process tool: the server in the background, the client until it succeeds
 * (retried while the server is not listening yet, up to 10 s), then stops the server.
 */
async function clientServer(
  server: { cmd: string; args: string[]; env?: NodeJS.ProcessEnv },
  client: { cmd: string; args: string[]; env?: NodeJS.ProcessEnv },
  notReady: RegExp,
): Promise<{ stdout: string; stderr: string }> {
  const srv = spawn(server.cmd, server.args, { stdio: 'ignore', env: { ...process.env, ...server.env } });
  const srvExit = new Promise<void>((r) => srv.once('exit', () => r()));
  try {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const c = spawn(client.cmd, client.args, { env: { ...process.env, ...client.env } });
        let stdout = '';
        let stderr = '';
        c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        c.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        c.once('exit', (code) => resolve({ code, stdout, stderr }));
      });
      // iperf3 -J exits 0 even when it could not connect: the output says so.
      const waiting = notReady.test(r.stdout + r.stderr);
      if (r.code === 0 && !waiting) return r;
      if (!waiting || Date.now() > deadline) {
        throw new Error(
          `${client.cmd} failed (${r.code}): ${(r.stderr || r.stdout).trim().split('\n').slice(-2).join(' ')}`,
        );
      }
      await new Promise((res) => setTimeout(res, 50));
    }
  } finally {
    srv.kill();
    await srvExit;
  }
}

export type UcxTransport = 'posix' | 'tcp';

export const UCX_MISSING =
  'ucx_perftest not found (Debian/Ubuntu: apt-get install ucx-utils); no UCX baseline';

export function ucxAvailable(): boolean {
  return installed('ucx_perftest', '-h');
}

/**
 * One `ucx_perftest` run (server and client on loopback): `test` with `iterations` messages of
 * `size` bytes, one warm-up iteration of the same size; returns the client's last CSV line:
 * iterations, 50.0_percentile_lat, avg_lat, overall_lat (µs), avg_bw, overall_bw (MiB/s), avg_mr, overall_mr.
 */
async function ucxPerftest(
  transport: UcxTransport,
  test: string,
  size: number,
  iterations: number,
): Promise<number[]> {
  const port = await freePort();
  const env = transport === 'posix' ? { UCX_TLS: 'posix,self' } : { UCX_TLS: 'tcp', UCX_NET_DEVICES: 'lo' };
  const { stdout } = await clientServer(
    { cmd: 'ucx_perftest', args: ['-p', String(port)], env },
    {
      cmd: 'ucx_perftest',
      args: [
        '127.0.0.1',
        '-p',
        String(port),
        '-t',
        test,
        '-s',
        String(size),
        '-n',
        String(iterations),
        '-w',
        '1',
        '-f',
        '-v',
      ],
      env,
    },
    /connect\(\) failed|Connection refused/i,
  );
  const last = (stdout.trim().split('\n').at(-1)?.split(',') ?? []).map(Number);
  if (last.length < 8 || last.some((x) => !Number.isFinite(x)))
    throw new Error(`cannot read ucx_perftest's result: ${stdout.trim()}`);
  return last;
}

/** GB/s of `ucx_perftest -t ucp_put_bw` moving `iterations` messages of `size` bytes. */
export async function ucxPutGbps(transport: UcxTransport, size: number, iterations: number): Promise<number> {
  const mibs = (await ucxPerftest(transport, 'ucp_put_bw', size, iterations))[5]!;
  if (mibs <= 0) throw new Error(`ucx_perftest reported ${mibs} MiB/s`);
  return (mibs * 1048576) / 1e9;
}

/**
 * Round-trip µs (p50 of `iterations`) of `ucx_perftest -t tag_lat`: a ping-pong of `size`-byte
 * tagged messages, each side busy-polling its UCX worker. ucx_perftest prints half the round
 * trip; this returns the whole. Both directions carry `size` bytes (a one-block READ carries
 * them one way), so it is the stricter of the two for the same size.
 */
export async function ucxTagLatRttUs(
  transport: UcxTransport,
  size: number,
  iterations: number,
): Promise<number> {
  return 2 * (await ucxPerftest(transport, 'tag_lat', size, iterations))[1]!;
}

export const IPERF3_MISSING = 'iperf3 not found (Debian/Ubuntu: apt-get install iperf3); no iperf3 baseline';

export function iperf3Available(): boolean {
  return installed('iperf3', '--version');
}

/** GB/s of one iperf3 single-stream loopback run of `seconds`. */
export async function iperf3Gbps(seconds: number): Promise<number> {
  const port = await freePort();
  const { stdout } = await clientServer(
    { cmd: 'iperf3', args: ['-s', '-1', '-p', String(port)] },
    { cmd: 'iperf3', args: ['-c', '127.0.0.1', '-p', String(port), '-J', '-t', String(seconds)] },
    /unable to connect|Connection refused/i,
  );
  const j = JSON.parse(stdout) as { error?: string; end?: { sum_received?: { bits_per_second?: number } } };
  const bps = j.end?.sum_received?.bits_per_second;
  if (bps === undefined) throw new Error(`iperf3 gave no result${j.error ? `: ${j.error}` : ''}`);
  return bps / 8 / 1e9;
}

export const MEMCPY_MISSING = 'native addon not built (node scripts/build-native.mjs); no memcpy baseline';

const copyBytes = nativeFunctions<NativeCopy>('copyBytes')?.copyBytes ?? null;

export function memcpyAvailable(): boolean {
  return typeof copyBytes === 'function';
}

/** Two buffers of `bytes` in KV-like memory, allocated (and faulted in) once. */
function copyBuffers(bytes: number): { src: Uint8Array; dst: Uint8Array } {
  const src = new Uint8Array(allocateShared(bytes));
  const dst = new Uint8Array(allocateShared(bytes));
  src.fill(7);
  dst.fill(1);
  return { src, dst };
}

/** GB/s of one call of `copy`. */
function timed(bytes: number, copy: () => void): number {
  const t0 = performance.now();
  copy();
  return bytes / ((performance.now() - t0) / 1000) / 1e9;
}

/** A memcpy baseline over two buffers of `bytes`. */
export function memcpyRunner(bytes: number): () => number {
  const { src, dst } = copyBuffers(bytes);
  return () => timed(bytes, () => copyBytes!(dst, src));
}

/**
 * The receiver's pass of a same-host transfer on its own: copy `bytes` in blocks of
 * `blockBytes` while hashing them (copyAndChecksum, the native fused copyHash when built), on
 * `threads` threads sharing the blocks (copyAndChecksumRuns) when more than one.
 */
export function copyHashRunner(bytes: number, blockBytes: number, threads = 1): () => number {
  const { src, dst } = copyBuffers(bytes);
  const count = Math.floor(bytes / blockBytes);
  if (threads <= 1) return () => timed(bytes, () => copyAndChecksum(dst, src, blockBytes, count));
  const out = new Float64Array(count);
  return () => timed(bytes, () => copyAndChecksumRuns([{ dst, src, blockBytes, count }], out, threads));
}
