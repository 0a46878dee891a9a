/**
 * The privileged capabilities some fault tests need, each probed for real (a container
 * running as root may still forbid namespaces, mounts or loop devices), and how a missing
 * one is reported: a test skips with the probe's reason, unless CI said it expects that
 * capability (KVCONNECT_EXPECT_<NAME>=1, or KVCONNECT_EXPECT_PRIVILEGED=1 for all), in which
 * case the test file fails with the reason instead of skipping silently. `.ci/run` runs the
 * same probes (probe-capabilities.ts) to decide which flags to set.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export type Capability = 'netns' | 'tmpfs' | 'loop' | 'setpriv';

export const CAPABILITIES: readonly Capability[] = ['netns', 'tmpfs', 'loop', 'setpriv'];

/** Set by CI (.ci/run) when every capability probed available. */
export const EXPECT_PRIVILEGED_ENV = 'KVCONNECT_EXPECT_PRIVILEGED';

export const EXPECT_ENV: Readonly<Record<Capability, string>> = {
  netns: 'KVCONNECT_EXPECT_NETNS',
  tmpfs: 'KVCONNECT_EXPECT_TMPFS',
  loop: 'KVCONNECT_EXPECT_LOOP',
  setpriv: 'KVCONNECT_EXPECT_SETPRIV',
};

/** What each capability is, for messages. */
export const DESCRIPTION: Readonly<Record<Capability, string>> = {
  netns: 'network namespaces with a veth pair and a tc tbf qdisc',
  tmpfs: 'mounting a tmpfs',
  loop: 'a loop device with an ext4 filesystem mounted on it',
  setpriv: 'dropping CAP_DAC_OVERRIDE with setpriv',
};

/** Runs a command; null when it exited 0, else what went wrong. */
function run(argv: readonly string[]): string | null {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error) return `${argv[0]} is missing (${r.error.message})`;
  if (r.status !== 0)
    return `\`${argv.join(' ')}\` failed: ${(r.stderr || r.stdout).trim() || `exit ${r.status}`}`;
  return null;
}

function probeNetns(): string | null {
  const tag = `${process.pid % 100_000}`;
  const ns = `kvc-probe-${tag}`;
  const [a, b] = [`kvp${tag}a`, `kvp${tag}b`];
  try {
    return (
      run(['ip', 'netns', 'add', ns]) ??
      run(['ip', '-n', ns, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b]) ??
      run([
        'ip',
        'netns',
        'exec',
        ns,
        'tc',
        'qdisc',
        'add',
        'dev',
        a,
        'root',
        'tbf',
        'rate',
        '1mbit',
        'burst',
        '32kbit',
        'latency',
        '100ms',
      ])
    );
  } finally {
    spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
  }
}

/** A tmpfs mount, or (loop) an ext4 image on a loop device mounted, in a scratch directory. */
function probeMount(loop: boolean): string | null {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'kvc-probe-'));
  const mnt = path.join(dir, 'mnt');
  mkdirSync(mnt);
  let device = '';
  try {
    if (!loop) return run(['mount', '-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', mnt]);
    const image = path.join(dir, 'disk.img');
    const prepared = run(['truncate', '-s', '8M', image]) ?? run(['mkfs.ext4', '-q', '-F', image]);
    if (prepared !== null) return prepared;
    const r = spawnSync('losetup', ['-f', '--show', image], { encoding: 'utf8' });
    if (r.error || r.status !== 0)
      return `\`losetup -f --show\` failed: ${r.error?.message ?? r.stderr.trim()}`;
    device = r.stdout.trim();
    return run(['mount', device, mnt]);
  } finally {
    spawnSync('umount', [mnt], { stdio: 'ignore' });
    if (device !== '') spawnSync('losetup', ['-d', device], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Null when this process has the capability; otherwise why not (never throws). */
export function probeCapability(cap: Capability): string | null {
  if (process.getuid?.() !== 0) return 'needs root';
  switch (cap) {
    case 'netns':
      return probeNetns();
    case 'tmpfs':
      return probeMount(false);
    case 'loop':
      return probeMount(true);
    case 'setpriv':
      return run(['setpriv', '--bounding-set', '-dac_override,-dac_read_search', 'true']);
  }
}

const probed = new Map<Capability, string | null>();

/**
 * For a test's `skip`: false when the capability is there, else the reason to skip. Throws
 * when the environment says the capability is expected, so CI fails instead of skipping.
 */
export function skipUnless(cap: Capability): string | false {
  if (!probed.has(cap)) probed.set(cap, probeCapability(cap));
  const why = probed.get(cap)!;
  if (why === null) return false;
  const flag = EXPECT_ENV[cap];
  if (process.env[flag] === '1' || process.env[EXPECT_PRIVILEGED_ENV] === '1') {
    throw new Error(
      `${process.env[flag] === '1' ? flag : EXPECT_PRIVILEGED_ENV}=1 but ${DESCRIPTION[cap]} is not possible here: ${why}. Run the tests as root where it is allowed, or unset the flag.`,
    );
  }
  return `needs ${DESCRIPTION[cap]}: ${why}`;
}
