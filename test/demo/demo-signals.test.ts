/**
 * `kvconnect demo --keep-running` prints curl commands and the server pids; SIGINT stops
 * every server it started, and so does SIGKILL of the demo (the servers watch their stdin).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isAlive, runDemoCli } from './helpers/run-cli.ts';

async function waitForOutput(get: () => string, pattern: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(get())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${pattern}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function waitDead(pids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let alive = pids.filter(isAlive);
  while (alive.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    alive = pids.filter(isAlive);
  }
  return alive;
}

const SMALL = ['--requests', '4', '--families', '2', '--concurrency', '2', '--max-tokens', '4'];

test('--keep-running serves curl-able URLs until SIGINT, then no server is left', async () => {
  const demo = runDemoCli([...SMALL, '--keep-running']);
  try {
    await waitForOutput(demo.out, /Stop everything with Ctrl-C/, 25_000);
    const pids = [...demo.out().matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
    assert.equal(pids.length, 3, demo.out());
    assert.deepEqual(pids.filter(isAlive), pids);
    const proxyUrl = /proxy\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(demo.out())?.[1];
    assert.ok(proxyUrl);
    const curl = demo
      .out()
      .split('\n')
      .find((l) => l.includes(`curl -s ${proxyUrl}/v1/completions`));
    const body = /-d '(.*)'$/.exec(curl ?? '')?.[1];
    assert.ok(body, 'no curl command for the proxy');
    const res = await fetch(`${proxyUrl}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    assert.equal(res.status, 200);
    await res.json();
    demo.child.kill('SIGINT');
    assert.equal(await demo.exited, 0);
    assert.deepEqual(await waitDead(pids, 8000), [], 'servers left running after SIGINT');
  } finally {
    demo.killGroup();
  }
});

test('servers stop by themselves when the demo is killed with SIGKILL', async () => {
  const demo = runDemoCli([...SMALL, '--keep-running']);
  let pids: number[] = [];
  try {
    await waitForOutput(demo.out, /Stop everything with Ctrl-C/, 25_000);
    pids = [...demo.out().matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
    assert.equal(pids.length, 3);
    demo.child.kill('SIGKILL');
    await demo.exited;
    assert.deepEqual(await waitDead(pids, 8000), [], 'servers orphaned after SIGKILL of the demo');
  } finally {
    demo.killGroup();
    for (const pid of pids.filter(isAlive)) process.kill(pid, 'SIGKILL');
  }
});
