/**
 * A same-host identity for the shm transport: two agents may share /dev/shm files only if
 * they run under one kernel (boot id) on one host name and use the same staging directory.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';

export function defaultShmDir(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}

export function localHostId(shmDir: string): string {
  let boot = '';
  try {
    boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    // Not Linux: host name and directory alone.
  }
  return createHash('sha256').update(`${hostname()}|${boot}|${shmDir}`).digest('hex').slice(0, 32);
}
