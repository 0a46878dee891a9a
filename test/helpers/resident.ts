/**
 * How much of a mapping of this process is resident (Linux, /proc/self/smaps): the tests of
 * KV memory that must be populated up front find their mapping by its size and permissions.
 */
import { readFileSync } from 'node:fs';

/**
 * Resident bytes of this process's mappings of exactly `bytes` bytes whose permissions start
 * with `perms` (`rw-s` for the owner's KV, `r--s` for a peer's read-only view), summed; null
 * when there is none.
 */
export function residentBytes(bytes: number, perms: string): number | null {
  let total: number | null = null;
  let inside = false;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+)/.exec(line);
    if (head) {
      const size = Number.parseInt(head[2]!, 16) - Number.parseInt(head[1]!, 16);
      inside = size === bytes && head[3]!.startsWith(perms);
      continue;
    }
    const rss = inside ? /^Rss:\s+(\d+) kB/.exec(line) : null;
    if (rss) total = (total ?? 0) + Number(rss[1]) * 1024;
  }
  return total;
}
