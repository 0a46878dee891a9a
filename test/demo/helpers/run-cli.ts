/** Runs `kvconnect demo …` as a real child process (own process group) and captures it. */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { captureOutput } from '../../helpers/captured-child.ts';

const MAIN = fileURLToPath(new URL('../../../src/cli/main.ts', import.meta.url));

export interface DemoChild {
  child: ChildProcessByStdio<null, Readable, Readable>;
  exited: Promise<number | null>;
  out(): string;
  err(): string;
  /** Kills the whole process group (the demo and anything it started). */
  killGroup(): void;
}

export function runDemoCli(args: string[]): DemoChild {
  const env: NodeJS.ProcessEnv = { ...process.env, KVCONNECT_LOG_LEVEL: 'error' };
  delete env['NODE_TEST_CONTEXT'];
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN, 'demo', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env,
  });
  const { exited, out, err } = captureOutput(child);
  return {
    child,
    exited,
    out,
    err,
    killGroup: () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    },
  };
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
