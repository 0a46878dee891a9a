/**
 * Two network namespaces joined by a veth pair, created by a test and deleted after it: a
 * real link whose bandwidth `tc tbf` can limit and which can be unplugged (link down: no
 * FIN, no RST, TCP retransmits), with nothing outside the two namespaces involved. Needs
 * root (CAP_NET_ADMIN); see capabilities.ts for how a missing capability is reported.
 */
import { type ChildProcess, execFileSync, type StdioOptions, spawn, spawnSync } from 'node:child_process';

export interface NetnsSide {
  readonly ns: string;
  readonly dev: string;
  readonly ip: string;
}

export interface NetnsPair {
  readonly a: NetnsSide;
  readonly b: NetnsSide;
  /** Starts `argv` inside a side's namespace (stdio as given). */
  spawnIn(side: NetnsSide, argv: readonly string[], stdio: StdioOptions): ChildProcess;
  /** Limits what `side` sends to `kbit` kbit/s with a token bucket. */
  limit(side: NetnsSide, kbit: number): void;
  /** Unplugs (or plugs back) the link on both ends. */
  setLink(up: boolean): void;
  /** Bytes `side`'s end of the link has sent. */
  txBytes(side: NetnsSide): number;
  destroy(): void;
}

let counter = 0;

function ip(args: readonly string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

export function createNetnsPair(): NetnsPair {
  const tag = `${process.pid % 100_000}${counter++}`;
  const a: NetnsSide = { ns: `kvc-${tag}-a`, dev: `kv${tag}a`, ip: '10.251.0.1' };
  const b: NetnsSide = { ns: `kvc-${tag}-b`, dev: `kv${tag}b`, ip: '10.251.0.2' };
  const destroy = (): void => {
    for (const s of [a, b]) spawnSync('ip', ['netns', 'del', s.ns], { stdio: 'ignore' });
  };
  try {
    for (const s of [a, b]) ip(['netns', 'add', s.ns]);
    ip(['link', 'add', a.dev, 'type', 'veth', 'peer', 'name', b.dev]);
    for (const s of [a, b]) {
      ip(['link', 'set', s.dev, 'netns', s.ns]);
      ip(['-n', s.ns, 'addr', 'add', `${s.ip}/30`, 'dev', s.dev]);
      ip(['-n', s.ns, 'link', 'set', 'lo', 'up']);
      ip(['-n', s.ns, 'link', 'set', s.dev, 'up']);
    }
  } catch (e) {
    destroy();
    throw e;
  }
  return {
    a,
    b,
    spawnIn: (side, argv, stdio) => spawn('ip', ['netns', 'exec', side.ns, ...argv], { stdio }),
    limit: (side, kbit) => {
      execFileSync('ip', [
        'netns',
        'exec',
        side.ns,
        'tc',
        'qdisc',
        'replace',
        'dev',
        side.dev,
        'root',
        'tbf',
        'rate',
        `${kbit}kbit`,
        'burst',
        '16kb',
        'latency',
        '500ms',
      ]);
    },
    setLink: (up) => {
      for (const s of [a, b]) ip(['-n', s.ns, 'link', 'set', s.dev, up ? 'up' : 'down']);
    },
    txBytes: (side) =>
      Number(
        execFileSync(
          'ip',
          ['netns', 'exec', side.ns, 'cat', `/sys/class/net/${side.dev}/statistics/tx_bytes`],
          {
            encoding: 'utf8',
          },
        ).trim(),
      ),
    destroy,
  };
}
