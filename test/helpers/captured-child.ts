/** Collects a spawned child's stdout and stderr as text, and its exit code as a promise. */
import type { ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';

export interface CapturedOutput {
  exited: Promise<number | null>;
  out(): string;
  err(): string;
}

export function captureOutput(child: ChildProcessByStdio<null, Readable, Readable>): CapturedOutput {
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { exited, out: () => stdout, err: () => stderr };
}
