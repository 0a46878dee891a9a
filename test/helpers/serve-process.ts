/**
 * `kvconnect serve` in a child process of its own, for tests that need a real server process
 * (one to kill, or to restart): resolves with its URL once it says it listens. `tinyServeArgs`
 * builds the usual argument list (the tiny model, a port, a KV pool and context size, a
 * kv-transfer-config).
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export type ServeProcess = ChildProcessByStdio<null, Readable, null>;

/** Starts `kvconnect serve ARGS` (logging at error); rejects if it exits before listening. */
export function serveProcess(args: readonly string[]): Promise<{ url: string; proc: ServeProcess }> {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, KVCONNECT_LOG_LEVEL: 'error' },
  });
  return new Promise((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`kvconnect serve exited early (${code})`)));
    createInterface({ input: proc.stdout }).on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) resolve({ url: m[1]!, proc });
    });
  });
}

export interface TinyServeOptions {
  /** Default 0 (any free port). */
  port?: number;
  numGpuBlocks: number;
  maxModelLen: number;
  /** Given as --kv-transfer-config. */
  transfer?: Record<string, unknown>;
  /** More flags, placed before --kv-transfer-config. */
  flags?: readonly string[];
}

/** `kvconnect serve` arguments for the tiny model. */
export function tinyServeArgs(o: TinyServeOptions): string[] {
  return [
    '--model',
    'tiny',
    '--port',
    String(o.port ?? 0),
    '--num-gpu-blocks',
    String(o.numGpuBlocks),
    '--max-model-len',
    String(o.maxModelLen),
    ...(o.flags ?? []),
    ...(o.transfer ? ['--kv-transfer-config', JSON.stringify(o.transfer)] : []),
  ];
}
