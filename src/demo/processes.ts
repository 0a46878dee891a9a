/**
 * Child `kvconnect serve` processes: spawned with the same Node.js flags as this process
 * (so it works under tsx and from dist/), each in its own process group, killed as a group.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { KVError } from '../errors/kv-error.ts';
import { processEnvironment } from '../util/envs.ts';

const TAIL_BYTES = 4096;
const STOP_GRACE_MS = 5000;
const LISTENING = /listening on (http:\/\/[^\s]+)/;

/**
 * The program the demo runs for each server: `kvconnect serve` with a watchdog on stdin
 * (src/cli/serve-child.ts under tsx, dist/cli/serve-child.js when built). It is spawned,
 * never imported, so the demo does not depend on the CLI's modules.
 */
export function serveChildEntry(): string {
  const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  return fileURLToPath(new URL(`../cli/serve-child${ext}`, import.meta.url));
}

/** This process's Node.js flags minus the ones that must not be inherited. */
export function childExecArgv(): string[] {
  return process.execArgv.filter((a) => !a.startsWith('--test') && !a.startsWith('--inspect'));
}

export interface ServeProcess {
  name: string;
  url: string;
  pid: number;
  /** The last few KiB the process wrote to stderr (for error reports). */
  stderrTail(): string;
  /** Resolves with the exit code (or null when killed by a signal). */
  exited: Promise<number | null>;
  /** SIGTERM to the process group, SIGKILL after a grace period; resolves once it exited. */
  stop(): Promise<void>;
}

type Child = ChildProcessByStdio<Writable, Readable, Readable>;

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

function startFailed(name: string, why: string, tail: string): KVError {
  return new KVError('DEMO_SERVER_START_FAILED', `The ${name} server did not start: ${why}`, {
    hint: tail.trim()
      ? `Its last output was:\n${tail.trim()}`
      : 'Run the same `kvconnect serve` command by hand to see why (see docs/demo.md, Troubleshooting).',
  });
}

export interface StartServeOptions {
  timeoutMs: number;
  env?: Record<string, string>;
  /** Registered as soon as the process exists, so a Ctrl-C during startup stops it too. */
  group?: ProcessGroup;
}

/** Starts `kvconnect serve ARGS` and resolves once it answers GET /health. */
export async function startServe(
  name: string,
  args: readonly string[],
  { timeoutMs, env = {}, group }: StartServeOptions,
): Promise<ServeProcess> {
  const childEnv: NodeJS.ProcessEnv = { KVCONNECT_LOG_LEVEL: 'warn', ...processEnvironment(), ...env };
  delete childEnv['NODE_TEST_CONTEXT'];
  const child: Child = spawn(process.execPath, [...childExecArgv(), serveChildEntry(), ...args], {
    detached: true,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: childEnv,
  });
  let stdout = '';
  let tail = '';
  child.stderr.on('data', (d: Buffer) => {
    tail = (tail + d.toString()).slice(-TAIL_BYTES);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const pid = child.pid;
  const stop = async (): Promise<void> => {
    if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    killGroup(pid, 'SIGTERM');
    const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), STOP_GRACE_MS);
    await exited;
    clearTimeout(timer);
    killGroup(pid, 'SIGKILL'); // anything left in the group
  };
  if (pid !== undefined) group?.track({ name, pid, stop, stderrTail: () => tail });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(startFailed(name, `no address after ${timeoutMs} ms`, tail)),
      timeoutMs,
    );
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = LISTENING.exec(stdout);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(startFailed(name, `it exited with code ${code}`, tail));
    });
    void spawnError.then((e) => {
      clearTimeout(timer);
      reject(startFailed(name, e.message, tail));
    });
  }).catch(async (e: unknown) => {
    await stop();
    throw e;
  });
  if (pid === undefined) throw startFailed(name, 'no process id', tail);
  const proc: ServeProcess = { name, url, pid, stderrTail: () => tail, exited, stop };
  try {
    await waitHealthy(url, timeoutMs);
  } catch (e) {
    await stop();
    throw startFailed(name, (e as Error).message, tail);
  }
  return proc;
}

export async function waitHealthy(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}/health`);
      await res.arrayBuffer();
      if (res.ok) return;
      last = `GET /health answered ${res.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} is not healthy after ${timeoutMs} ms (${last})`);
}

/**
 * Every process the demo started. stopAll() is idempotent; the exit hook SIGKILLs any group
 * still alive if the demo exits without stopping them (e.g. an uncaught error).
 */
export interface GroupMember {
  name: string;
  pid: number;
  stop(): Promise<void>;
  stderrTail(): string;
}

export class ProcessGroup {
  readonly #members: GroupMember[] = [];
  readonly #onExit = (): void => {
    for (const p of this.#members) killGroup(p.pid, 'SIGKILL');
  };

  constructor() {
    process.on('exit', this.#onExit);
  }

  track(member: GroupMember): void {
    this.#members.push(member);
  }

  get processes(): readonly GroupMember[] {
    return this.#members;
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.#members.map((m) => m.stop()));
    process.off('exit', this.#onExit);
  }
}
