/**
 * A real S3-compatible server for tests: s3rver (an npm devDependency, so it is always
 * installed by `npm ci`), run as its own process on a free loopback port with its data in a
 * temp directory and the named buckets created at startup; with `tls`, it serves https with
 * a self-signed certificate for 127.0.0.1 made by openssl. `kill()` ends it with SIGKILL
 * (a crash, mid-run); `stop()` also removes its data.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';

/** The access key s3rver knows; it rejects any other with 403 InvalidAccessKeyId. */
export const S3RVER_ACCESS_KEY = 'S3RVER';
export const S3RVER_SECRET_KEY = 'S3RVER';

export interface S3Server {
  port: number;
  endpoint: string;
  directory: string;
  /** With `tls`: the PEM file of the server's self-signed certificate (its own CA). */
  certFile: string | null;
  process: ChildProcess;
  /** SIGKILL, data kept. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

const STARTUP_MS = 20_000;

/** A self-signed certificate for 127.0.0.1 in `dir` (throws, naming the package, without openssl). */
function selfSignedCert(dir: string): { key: string; cert: string } {
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  const r = spawnSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2'].concat([
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ]),
    { encoding: 'utf8' },
  );
  if (r.error || r.status !== 0) {
    throw new Error(
      `openssl could not make a test certificate (${r.error?.message ?? r.stderr}); install it (Debian: apt-get install openssl).`,
    );
  }
  return { key, cert };
}

export async function startS3Server(
  buckets: readonly string[],
  opts: { tls?: boolean } = {},
): Promise<S3Server> {
  const bin = createRequire(import.meta.url).resolve('s3rver/bin/s3rver.js');
  const directory = mkdtempSync(path.join(os.tmpdir(), 'kvc-s3rver-'));
  const args = [bin, '-d', directory, '-a', '127.0.0.1', '-p', '0', '--no-vhost-buckets'];
  let certFile: string | null = null;
  if (opts.tls) {
    const { key, cert } = selfSignedCert(mkdtempSync(path.join(directory, 'tls-')));
    args.push('--key', key, '--cert', cert);
    certFile = cert;
  }
  for (const b of buckets) args.push('--configure-bucket', b);
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`s3rver did not start within ${STARTUP_MS} ms: ${output}`));
    }, STARTUP_MS);
    const onData = (chunk: Buffer): void => {
      output += chunk.toString('utf8');
      const m = /S3rver listening on [^:]+:(\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`s3rver exited with ${code} before listening: ${output}`));
    });
  });
  child.stdout?.resume();
  child.stderr?.resume();
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  const kill = async (): Promise<void> => {
    child.kill('SIGKILL');
    await exited;
  };
  return {
    port,
    endpoint: `${opts.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    directory,
    certFile,
    process: child,
    kill,
    async stop() {
      await kill();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
