/**
 * A pod's `kvconnect serve` with POD_IP set (the downward API of deploy/kv-events.yaml) and KV
 * events without a topic publishes every frame under llm-d's topic kv@<pod-ip>:<port>@<model>,
 * on a real ZMQ socket, and reports that topic in GET /kvconnect/info. Each data-parallel rank
 * names its own port.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as zmq from 'zeromq';
import { runCli } from '../../src/cli/program.ts';
import { captureOutput } from '../helpers/captured-child.ts';
import { freePort } from '../helpers/free-port.ts';
import { waitUntil } from '../helpers/wait-until.ts';

const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

test("serve with POD_IP publishes its KV events under llm-d's topic kv@<pod-ip>:<port>@<model>", async () => {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      MAIN,
      'serve',
      '--model',
      'tiny',
      '--served-model-name',
      'org/tiny',
      '--max-model-len',
      '256',
      '--port',
      String(port),
      '--kv-events-config',
      '{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*"}',
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, POD_IP: '127.0.0.1', KVCONNECT_LOG_LEVEL: 'error' },
    },
  );
  const p = captureOutput(child);
  const sub = new zmq.Subscriber({ receiveTimeout: 500 });
  try {
    const expected = `kv@127.0.0.1:${port}@org/tiny`;
    const url = await waitUntil(
      `serve's address (stderr: ${p.err()})`,
      () => /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(p.out())?.[1],
      { timeoutMs: 30_000 },
    );
    // serve prints the events line right after the address line, in a separate write.
    const eventsLine = await waitUntil(
      `serve's KV events line (stdout: ${p.out()})`,
      () => /KV events on .*\n/.exec(p.out())?.[0],
      { timeoutMs: 5_000 },
    );
    assert.match(
      eventsLine,
      new RegExp(`KV events on tcp://127\\.0\\.0\\.1:\\d+ topic ${expected.replaceAll('.', '\\.')}\\n`),
    );
    const info = (await (await fetch(`${url}/kvconnect/info`)).json()) as {
      kv_events: { endpoint: string; topic: string };
    };
    assert.equal(info.kv_events.topic, expected);

    sub.subscribe('kv@');
    sub.connect(info.kv_events.endpoint);
    // PUB drops frames until the subscription reaches it: new prompts until one arrives.
    let frames: Buffer[] | null = null;
    for (let i = 0; frames === null && i < 40; i++) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'org/tiny', prompt: `request ${i} `.repeat(12), max_tokens: 1 }),
      });
      assert.equal(res.status, 200);
      await res.json();
      try {
        frames = await sub.receive();
      } catch {
        frames = null;
      }
    }
    assert.ok(frames, 'a KV events frame arrived');
    assert.equal(frames.length, 3, '[topic, seq, payload]');
    assert.equal(frames[0]?.toString('utf8'), expected);
  } finally {
    sub.close();
    child.kill('SIGTERM');
    await p.exited;
  }
});

test('with --data-parallel-size each rank publishes under the topic of its own port', async () => {
  let out = '';
  let err = '';
  const saved = process.env['POD_IP'];
  process.env['POD_IP'] = '10.244.1.7';
  try {
    const code = await runCli(
      [
        'serve',
        '--model',
        'tiny',
        '--port',
        '8000',
        '--data-parallel-size',
        '2',
        '--kv-events-config.enable_kv_cache_events',
        'true',
        '--dry-run',
      ],
      {
        out: (t) => {
          out += t;
        },
        err: (t) => {
          err += t;
        },
      },
    );
    assert.equal(code, 0, err);
  } finally {
    if (saved === undefined) delete process.env['POD_IP'];
    else process.env['POD_IP'] = saved;
  }
  assert.deepEqual(
    [...out.matchAll(/on 127\.0\.0\.1:(\d+), no KV connector, KV events (\S+) topic (\S+)\n/g)].map((m) =>
      m.slice(1),
    ),
    [
      ['8000', 'tcp://*:5557', 'kv@10.244.1.7:8000@tiny'],
      ['8001', 'tcp://*:5558', 'kv@10.244.1.7:8001@tiny'],
    ],
  );
});
