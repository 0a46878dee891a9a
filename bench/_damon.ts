/**
 * Whether the kernel's DAMON runs a `pageout` scheme (sysfs: /sys/kernel/mm/damon/admin).
 *
 * A kdamond with a pageout scheme over physical memory makes memory that sat idle for a few
 * seconds slow to touch again, several times slower after 5–10 s, while with the kdamond off
 * idle time costs nothing (`npm run bench -- memory-idle`; docs/BENCHMARKS.md, "DAMON").
 * A benchmark whose contestants keep long-lived buffers (kvconnect's agents, the
 * memcpy baseline) against ones that allocate fresh memory for every sample (ucx_perftest,
 * iperf3) is then skewed, so the transfer benchmarks say so in their header and notes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const DAMON_SYSFS = '/sys/kernel/mm/damon/admin';

function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

function entries(path: string): string[] {
  try {
    return readdirSync(path).filter((n) => /^\d+$/.test(n));
  } catch {
    return [];
  }
}

/** The kdamonds (by index) that are on and run at least one `pageout` scheme. */
export function damonPageoutKdamonds(root = DAMON_SYSFS): string[] {
  const found: string[] = [];
  for (const k of entries(join(root, 'kdamonds'))) {
    const kdamond = join(root, 'kdamonds', k);
    if (read(join(kdamond, 'state')) !== 'on') continue;
    const pageout = entries(join(kdamond, 'contexts')).some((c) =>
      entries(join(kdamond, 'contexts', c, 'schemes')).some(
        (s) => read(join(kdamond, 'contexts', c, 'schemes', s, 'action')) === 'pageout',
      ),
    );
    if (pageout) found.push(k);
  }
  return found;
}

/** A note for a benchmark's output when DAMON pageout is on, else null. */
export function damonPageoutNote(root = DAMON_SYSFS): string | null {
  const on = damonPageoutKdamonds(root);
  if (on.length === 0) return null;
  const states = on.map((k) => join(root, 'kdamonds', k, 'state')).join(' ');
  return (
    `DAMON pageout is on (kdamond ${on.join(', ')}): memory idle for a few seconds is slower to touch, ` +
    'which penalizes long-lived buffers (the agents, memcpy) against tools that allocate fresh memory per sample (ucx_perftest, iperf3); ' +
    `to measure without it (as root): for f in ${states}; do echo off > $f; done (and 'on' afterwards)`
  );
}
