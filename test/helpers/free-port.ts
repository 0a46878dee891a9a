/**
 * Fixed ports for servers a test starts later (a child engine's handshake port, a Redis).
 * They are picked below the kernel's ephemeral range: a port the OS hands out for `listen(0)`
 * lies inside it, and between closing it and the child binding it, any outgoing connection on
 * the machine may take it as its local port (seen as EADDRINUSE under load). Outside that range
 * only another listener can take it, and each candidate is checked bindable first.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** First port of the ephemeral range (32768 where /proc does not say). */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

const LOWEST = 10_000;

/**
 * A base port whose `span` ports, and the same ports shifted by each of `alsoOffsets` (e.g.
 * Redis Cluster's bus port, +10000), are free right now and outside the ephemeral range.
 */
export async function freePortRange(span = 1, alsoOffsets: readonly number[] = []): Promise<number> {
  const top = ephemeralLow() - span - Math.max(0, ...alsoOffsets);
  if (top <= LOWEST) throw new Error(`no room for ${span} ports below the ephemeral range`);
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = LOWEST + Math.floor(Math.random() * (top - LOWEST));
    let ok = true;
    for (const shift of [0, ...alsoOffsets]) {
      for (let i = 0; i < span && ok; i++) ok = await bindable(base + shift + i);
    }
    if (ok) return base;
  }
  throw new Error('no free port range below the ephemeral range');
}

/** One free port, as freePortRange. */
export function freePort(): Promise<number> {
  return freePortRange(1);
}
