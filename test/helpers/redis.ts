/**
 * Real redis-server processes for tests and benchmarks: a single server or a 3-node
 * Redis Cluster on free loopback ports, no persistence, always killed by stop(). If
 * redis-server is not installed this throws (tests must fail, not skip).
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePortRange } from './free-port.ts';

const execFileP = promisify(execFile);

export interface RedisServer {
  port: number;
  url: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface RedisClusterHandle {
  nodes: RedisServer[];
  urls: string[];
  stop(): Promise<void>;
}

export function requireRedisBinaries(): void {
  for (const bin of ['redis-server', 'redis-cli']) {
    const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
    if (r.error || r.status !== 0) {
      throw new Error(
        `${bin} is not installed or not on PATH: the Redis tier tests need a real server. Install it (Debian/Ubuntu: apt-get install redis-server) and run the tests again.`,
      );
    }
  }
}

/** A Redis Cluster node also listens on its port + 10000 (the cluster bus). */
const CLUSTER_BUS_OFFSET = 10_000;

/** A free port for a Redis server; a cluster node's bus port is free too. */
function redisPort(clusterNode: boolean): Promise<number> {
  return freePortRange(1, clusterNode ? [CLUSTER_BUS_OFFSET] : []);
}

/** Sends one inline command and returns the whole reply of a bulk-string answer (e.g. INFO, CLUSTER NODES). */
export async function redisCommandFull(port: number, command: string, timeoutMs = 1000): Promise<string> {
  const reply = await redisCommand(port, command, timeoutMs);
  return reply.startsWith('$') ? reply.slice(reply.indexOf('\r\n') + 2) : reply;
}

/** Sends one inline command and returns the first reply line. */
export function redisCommand(port: number, command: string, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`redis on ${port} did not answer ${command}`));
    }, timeoutMs);
    sock.on('connect', () => sock.write(`${command}\r\n`));
    sock.on('data', (chunk) => {
      data += chunk.toString('utf8');
      if (data.includes('\r\n') && !data.startsWith('$')) finish();
      else if (data.startsWith('$')) {
        const len = Number(data.slice(1, data.indexOf('\r\n')));
        if (data.length >= data.indexOf('\r\n') + 2 + len) finish();
      }
    });
    sock.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    function finish(): void {
      clearTimeout(timer);
      sock.destroy();
      resolve(data);
    }
  });
}

async function waitForPing(port: number, child: ChildProcess, deadlineMs = 10_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    if (child.exitCode !== null)
      throw new Error(`redis-server on port ${port} exited with ${child.exitCode}`);
    try {
      if ((await redisCommand(port, 'PING', 500)).startsWith('+PONG')) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server on port ${port} did not answer PING within ${deadlineMs} ms`);
}

function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

export async function startRedis(extraArgs: string[] = [], portArg?: number): Promise<RedisServer> {
  requireRedisBinaries();
  const port = portArg ?? (await redisPort(extraArgs.includes('--cluster-enabled')));
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      ...extraArgs,
    ],
    { stdio: 'ignore' },
  );
  const server: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    process: child,
    stop: () => stopProcess(child),
  };
  try {
    await waitForPing(port, child);
  } catch (err) {
    await server.stop();
    throw err;
  }
  return server;
}

export interface ClusterOptions {
  /** Replicas per master (redis-cli --cluster-replicas). Default 0. */
  readonly replicas?: number;
  /** cluster-node-timeout: how long a silent master takes to be failed over. Default 5000. */
  readonly nodeTimeoutMs?: number;
}

/**
 * A Redis Cluster of `size` masters, each with `replicas` replicas, created with redis-cli
 * --cluster create; resolves once every node reports cluster_state:ok (and, with replicas,
 * every replica is attached to its master).
 */
export async function startRedisCluster(size = 3, options: ClusterOptions = {}): Promise<RedisClusterHandle> {
  requireRedisBinaries();
  const replicas = options.replicas ?? 0;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-redis-cluster-'));
  const nodes: RedisServer[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => n.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < size * (1 + replicas); i++) {
      const port = await redisPort(true);
      nodes.push(
        await startRedis(
          [
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            path.join(dir, `nodes-${port}.conf`),
            '--cluster-node-timeout',
            String(options.nodeTimeoutMs ?? 5000),
            // A replica syncs at once (Redis waits 5 s by default for more replicas to join a sync).
            '--repl-diskless-sync-delay',
            '0',
            '--dir',
            dir,
          ],
          port,
        ),
      );
    }
    await execFileP('redis-cli', [
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
    const until = Date.now() + 30_000;
    const ready = async (port: number): Promise<boolean> => {
      if (!(await redisCommand(port, 'CLUSTER INFO')).includes('cluster_state:ok')) return false;
      const role = await redisCommandFull(port, 'INFO replication');
      return !role.includes('role:slave') || role.includes('master_link_status:up');
    };
    for (const n of nodes) {
      while (!(await ready(n.port))) {
        if (Date.now() > until) throw new Error('redis cluster did not reach cluster_state:ok');
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes, urls: nodes.map((n) => n.url), stop };
}
