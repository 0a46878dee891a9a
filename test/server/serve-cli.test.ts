/**
 * `kvconnect serve` as a process: a bad --kv-transfer-config stops it before it listens
 * (exact vLLM message + hint, exit 2); a good one prints its address, serves, and shuts
 * down cleanly on SIGTERM.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { captureOutput } from '../helpers/captured-child.ts';

const ENTRY = fileURLToPath(new URL('./fixtures/serve-entry.ts', import.meta.url));

function run(args: string[], logLevel = 'error') {
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, KVCONNECT_LOG_LEVEL: logLevel },
  });
  return { child, ...captureOutput(child) };
}

/** The address `serve` prints once it listens (fails after 15 s). */
async function printedAddress(p: ReturnType<typeof run>): Promise<string> {
  const deadline = Date.now() + 15_000;
  let url: string | undefined;
  while (!url && Date.now() < deadline) {
    url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(p.out())?.[1];
    if (!url) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(url, `no address printed; stderr: ${p.err()}`);
  return url;
}

test('a bad --kv-transfer-config exits 2 before listening, with the exact message and a hint', async () => {
  const p = run(['--port', '0', '--kv-transfer-config', '{"kv_connector":"NixlConnector"}']);
  const code = await p.exited;
  assert.equal(code, 2);
  const lines = p.err().trim().split('\n');
  assert.equal(
    lines[0],
    "error[KV_ROLE_REQUIRED]: Please specify kv_role when kv_connector is set, supported roles are ('kv_producer', 'kv_both', 'kv_consumer')",
  );
  assert.match(lines[1] ?? '', /^hint: .*kv_role/);
  assert.doesNotMatch(p.out(), /listening/);
});

test('serve prints its address, answers, and stops cleanly on SIGTERM', async () => {
  const p = run([
    '--port',
    '0',
    '--model',
    'tiny',
    '--max-model-len',
    '512',
    '--served-model-name',
    'my-tiny',
    '--max-num-seqs',
    '4',
  ]);
  try {
    const url = await printedAddress(p);
    const models = (await (await fetch(`${url}/v1/models`)).json()) as {
      data: Array<{ id: string; max_model_len: number }>;
    };
    assert.deepEqual(
      models.data.map((m) => [m.id, m.max_model_len]),
      [['my-tiny', 512]],
    );
    const info = (await (await fetch(`${url}/kvconnect/info`)).json()) as Record<string, unknown>;
    assert.equal(info['kv_connector'], null);
    assert.equal(info['tensor_parallel_size'], 1);
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'my-tiny', prompt: 'hi', max_tokens: 2 }),
    });
    assert.equal(res.status, 200);
    await res.json();
    p.child.kill('SIGTERM');
    assert.equal(await p.exited, 0);
  } finally {
    if (p.child.exitCode === null) p.child.kill('SIGKILL');
  }
});

test('serve --failure-injection-rate, --fake-metrics, --startup-duration: warned at startup, in effect', async () => {
  const p = run(
    [
      '--port',
      '0',
      '--model',
      'tiny',
      '--mode',
      'random',
      '--failure-injection-rate',
      '100',
      '--failure-types',
      'rate_limit',
      'server_error',
      '--fake-metrics',
      '{"running-requests": 4, "kv-cache-usage": "oscillate:0:1:10s"}',
      '--startup-duration',
      '1500ms',
    ],
    'warn',
  );
  try {
    const url = await printedAddress(p);
    assert.match(p.err(), /FAILURE INJECTION IS ON: 100% .*\(rate_limit, server_error\)/);
    assert.match(p.err(), /FAKE METRICS ARE ON/);
    assert.equal((await fetch(`${url}/health/ready`)).status, 503);
    const statuses = new Set<number>();
    for (let i = 0; i < 30; i++) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: 2 }),
      });
      statuses.add(res.status);
      await res.arrayBuffer();
    }
    assert.deepEqual([...statuses].sort(), [429, 503]);
    assert.match(await (await fetch(`${url}/metrics`)).text(), /^vllm:num_requests_running\{[^}]*\} 4\.0$/m);
    while ((await fetch(`${url}/health/ready`)).status !== 200) await new Promise((r) => setTimeout(r, 50));
    p.child.kill('SIGTERM');
    assert.equal(await p.exited, 0);
  } finally {
    if (p.child.exitCode === null) p.child.kill('SIGKILL');
  }
});

test('a bad steering flag exits 2 naming it', async () => {
  const cases = [
    [['--failure-injection-rate', '120'], 'failure-injection-rate'],
    [['--failure-types', 'teapot'], 'failure-types'],
    [['--fake-metrics', '{"kv-cache-usage": 2}'], 'fake-metrics.kv-cache-usage'],
    [['--kv-load-stall-rate', '5'], 'kv-load-stall-duration'],
    [['--startup-duration', '30'], 'startup-duration'],
  ] as const;
  const runs = cases.map(([args]) => run(['--port', '0', '--model', 'tiny', ...args]));
  for (const [i, [, field]] of cases.entries()) {
    const p = runs[i]!;
    assert.equal(await p.exited, 2, p.err());
    assert.match(
      p.err(),
      new RegExp(`^error\\[KV_CONFIG_INVALID\\]: Invalid value for ${field.replace('.', '\\.')}:`),
    );
    assert.match(p.err(), /\nhint: /);
  }
});
