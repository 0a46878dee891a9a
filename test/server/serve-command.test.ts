/**
 * `registerServeCommand` in-process on a fresh commander program: bad flags and configs are
 * refused with message + hint and exit code 2 before any engine or socket exists; a good
 * invocation (dotted --kv-transfer-config form) serves until its stop signal.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import * as zmq from 'zeromq';
import { registerServeCommand, type ServeDeps } from '../../src/cli/commands/serve.ts';
import type { CliContext } from '../../src/cli/context.ts';
import { extractDottedArgs } from '../../src/config/dotted-args.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { decodeBatch } from '../../src/kv-events/wire.ts';

async function serve(
  argv: string[],
  deps: ServeDeps = {},
  onOut: (text: string) => void = () => {},
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const { rest, dotted } = extractDottedArgs(argv, '--kv-transfer-config');
  const ctx: CliContext = {
    io: {
      out: (t) => {
        out += t;
        onOut(out);
      },
      err: (t) => {
        err += t;
      },
    },
    dottedKvTransferConfig: dotted,
    exitCode: 0,
  };
  const program = new Command('kvconnect')
    .exitOverride()
    .configureOutput({ writeOut: ctx.io.out, writeErr: ctx.io.err });
  registerServeCommand(program, ctx, deps);
  await program.parseAsync(['serve', ...rest], { from: 'user' });
  return { code: ctx.exitCode, out, err };
}

/** Runs serve until stop(): `urls` resolves once `count` servers printed their address. */
function serveRunning(argv: string[], deps: ServeDeps = {}, count = 1) {
  let stop!: () => void;
  const stopped = new Promise<void>((resolve) => {
    stop = resolve;
  });
  let printed = '';
  let ready!: (urls: string[]) => void;
  const listening = new Promise<string[]>((resolve) => {
    ready = resolve;
  });
  const run = serve(argv, { ...deps, stopSignal: () => stopped }, (out) => {
    printed = out;
    const urls = [...out.matchAll(/listening on (http:\/\/127\.0\.0\.1:\d+)/g)].map((m) => m[1] as string);
    if (urls.length >= count) ready(urls);
  });
  const urls = Promise.race([
    listening,
    run.then((r) => Promise.reject(new Error(`serve exited: ${r.err}`))),
  ]);
  return { urls, stop, run, output: () => printed };
}

const noEngine: ServeDeps = {
  createEngine: () => {
    throw new Error('the engine must not be created for an invalid configuration');
  },
};

test('invalid flags exit 2 with the message and a hint, before creating the engine', async () => {
  const cases: Array<[string[], RegExp]> = [
    [
      ['--port', '99999'],
      /^error\[KV_CONFIG_INVALID\]: Invalid value for port: expected an integer in 0\.\.65535, received "99999"\nhint: /,
    ],
    [
      ['--block-size', 'abc'],
      /^error\[KV_CONFIG_INVALID\]: Invalid value for block_size: expected an integer, received "abc"\nhint: /,
    ],
    [
      ['--prefix-caching-hash-algo', 'md5'],
      /^error\[KV_CONFIG_INVALID\]: Invalid value for prefix_caching_hash_algo: .*\nhint: .*sha256_cbor/,
    ],
    [
      ['--kv-transfer-config', '{"kv_connector": "NixlConnector", "kv_rol": "kv_producer"}'],
      /^error\[KV_CONFIG_UNKNOWN_KEY\]: Unknown field 'kv_rol' in kv_transfer_config\nhint: /,
    ],
    [
      ['--kv-transfer-config.kv_connector', 'NixlConnector'],
      /^error\[KV_ROLE_REQUIRED\]: Please specify kv_role when kv_connector is set/,
    ],
    [
      ['--show-hidden-metrics-for-version', 'latest'],
      /^error\[KV_CONFIG_INVALID\]: Invalid version: 'latest' \(show_hidden_metrics_for_version expects a version such as 0\.31\)\nhint: /,
    ],
  ];
  for (const [argv, expected] of cases) {
    const r = await serve(argv, noEngine);
    assert.equal(r.code, 2, argv.join(' '));
    assert.match(r.err, expected);
    assert.equal(r.out, '');
  }
});

test('an unknown connector stops the command before it listens', async () => {
  const r = await serve([
    '--port',
    '0',
    '--kv-transfer-config',
    '{"kv_connector":"NoSuchConnector","kv_role":"kv_both"}',
  ]);
  assert.equal(r.code, 2);
  assert.match(r.err, /^error\[[A-Z_]+\]: .*NoSuchConnector.*\nhint: /);
  assert.doesNotMatch(r.out, /listening/);
});

test('the dotted --kv-transfer-config form configures the connector of a running server', async () => {
  const server = serveRunning([
    '--port',
    '0',
    '--kv-transfer-config.kv_connector',
    'EchoParamsConnector',
    '--kv-transfer-config.kv_role',
    'kv_producer',
    '--kv-transfer-config.kv_connector_module_path',
    fileURLToPath(new URL('./fixtures/echo-connector.ts', import.meta.url)),
    '--kv-transfer-config.engine_id',
    'dotted-engine',
  ]);
  try {
    const [url] = await server.urls;
    const info = (await (await fetch(`${url}/kvconnect/info`)).json()) as Record<string, unknown>;
    assert.equal(info['kv_connector'], 'EchoParamsConnector');
    assert.equal(info['kv_role'], 'kv_producer');
    assert.equal(info['engine_id'], 'dotted-engine');
  } finally {
    server.stop();
  }
  const r = await server.run;
  assert.equal(r.code, 0, r.err);
});

test("--config reads llm-d-inference-sim's YAML: a published profile serves in emulated time", async () => {
  const profile = fileURLToPath(
    new URL('../fixtures/sim-latency-profiles/8b-h100-balanced-per-token.yaml', import.meta.url),
  );
  // Flags win over the file: the port (8000 in the profile) and the speedup.
  const server = serveRunning(['--config', profile, '--port', '0', '--speedup', '20', '--model', 'tiny']);
  try {
    const [url] = await server.urls;
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'meta-llama/Llama-3.1-8B-Instruct',
        prompt: 'hello',
        max_tokens: 5,
        ignore_eos: true,
      }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { usage: { completion_tokens: number } };
    assert.equal(body.usage.completion_tokens, 5);
    const info = (await (await fetch(`${url}/kvconnect/info`)).json()) as {
      emulation: Record<string, unknown>;
    };
    assert.equal(info.emulation['latency_calculator'], 'per-token');
    assert.equal(info.emulation['mode'], 'random');
    assert.equal(info.emulation['speedup'], 20);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    // Emulated TTFT: at least the profile's 30 ms overhead less its clamped jitter (sum of one request).
    const ttft = Number(/vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)/.exec(metrics)?.[1]);
    assert.ok(ttft >= 0.021, `ttft ${ttft}`);
  } finally {
    server.stop();
  }
  const r = await server.run;
  assert.equal(r.code, 0, r.err);
});

test('--config: a sim option kvconnect does not implement, and a duration without a unit, exit 2', async () => {
  const file = join(mkdtempSync(join(tmpdir(), 'kvc-serve-yaml-')), 'sim.yaml');
  writeFileSync(file, 'model: x\nimage-emission-rate: 2\n');
  const bad = await serve(['--config', file], noEngine);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /^error\[KV_CONFIG_UNKNOWN_KEY\]: llm-d-inference-sim option 'image-emission-rate'/);
  const unitless = await serve(['--inter-token-latency', '12'], noEngine);
  assert.equal(unitless.code, 2);
  assert.match(unitless.err, /Invalid value for inter-token-latency: expected a duration/);
});

test('--data-parallel-size N: N engines in one process, rank r on port + r with KV events on their port + r; X-data-parallel-rank pins', async () => {
  const zmqBase = 23000 + Math.floor(Math.random() * 20000);
  const ranks: number[] = [];
  const events = JSON.stringify({ enable_kv_cache_events: true, endpoint: `tcp://127.0.0.1:${zmqBase}` });
  const server = serveRunning(
    [
      '--mode',
      'random',
      '--model',
      'tiny',
      '--data-parallel-size',
      '2',
      '--port',
      '0',
      '--kv-events-config',
      events,
    ],
    {
      createEngine: (config) => {
        ranks.push(config.parallel.dataParallelRank);
        return AsyncEngine.create(config);
      },
    },
    2,
  );
  try {
    await server.urls;
    const printed = server.output();
    assert.deepEqual(ranks, [0, 1]);
    const urls = [
      ...printed.matchAll(/\(data-parallel rank (\d)\) listening on (http:\/\/127\.0\.0\.1:\d+)/g),
    ];
    assert.deepEqual(
      urls.map((m) => m[1]),
      ['0', '1'],
    );
    assert.notEqual(urls[0]?.[2], urls[1]?.[2]);
    assert.match(printed, new RegExp(`KV events on tcp://127\\.0\\.0\\.1:${zmqBase}\\b`));
    assert.match(printed, new RegExp(`KV events on tcp://127\\.0\\.0\\.1:${zmqBase + 1}\\b`));
    for (const m of urls) {
      const res = await fetch(`${m[2]}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: 2, ignore_eos: true }),
      });
      assert.equal(res.status, 200);
    }

    // X-data-parallel-rank pins a request to that rank's engine, whichever port it reached.
    const [url0, url1] = urls.map((m) => m[2] as string) as [string, string];
    const generated = async (url: string): Promise<number> => {
      const text = await (await fetch(`${url}/metrics`)).text();
      const line = text.split('\n').find((l) => l.startsWith('vllm:generation_tokens_total{'));
      return Number(line?.split(' ').at(-1));
    };
    const post = (rank: string, maxTokens = 5) =>
      fetch(`${url0}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'X-data-parallel-rank': rank },
        body: JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: maxTokens, ignore_eos: true }),
      });
    // Each rank labels its families with its own rank, as vLLM labels each engine it manages.
    for (const [rank, url] of [url0, url1].entries()) {
      const text = await (await fetch(`${url}/metrics`)).text();
      const engines = new Set([...text.matchAll(/^vllm:[^{]+\{[^}]*\bengine="(\d+)"/gm)].map((m) => m[1]));
      assert.deepEqual([...engines], [String(rank)]);
      assert.match(text, new RegExp(`^vllm:cache_config_info\\{[^}]*engine="${rank}"`, 'm'));
    }
    const before = [await generated(url0), await generated(url1)];
    assert.equal((await post('1')).status, 200);
    assert.deepEqual([await generated(url0), await generated(url1)], [before[0], (before[1] ?? 0) + 5]);
    assert.equal((await post(' +0 ', 3)).status, 200);
    assert.deepEqual(
      [await generated(url0), await generated(url1)],
      [(before[0] ?? 0) + 3, (before[1] ?? 0) + 5],
    );
    // vLLM ignores a value int() cannot parse: the receiving rank serves it.
    assert.equal((await post('one', 2)).status, 200);
    assert.equal(await generated(url0), (before[0] ?? 0) + 5);
    // A rank outside [0, data_parallel_size) is vLLM's 400, and the server keeps serving.
    for (const rank of ['2', '-1']) {
      const res = await post(rank);
      assert.equal(res.status, 400);
      const body = (await res.json()) as { error: { message: string; type: string; code: number } };
      assert.equal(body.error.message, `data_parallel_rank ${rank} is out of range [0, 2).`);
      assert.equal(body.error.type, 'BadRequestError');
      assert.equal(body.error.code, 400);
    }
    assert.equal((await post('1', 1)).status, 200);
    assert.equal(await generated(url1), (before[1] ?? 0) + 6);

    // Rank 1 publishes to the endpoint's port + 1 (a host endpoint: the publisher connects to
    // a subscriber that binds, as vLLM's does), data_parallel_rank 1 in every batch.
    const sub = new zmq.Subscriber({ receiveTimeout: 200, linger: 0 });
    try {
      await sub.bind(`tcp://127.0.0.1:${zmqBase + 1}`);
      sub.subscribe('');
      // Frames sent before the connection is up are dropped: new prompts until one arrives.
      let frames: Buffer[] | null = null;
      for (let i = 0; frames === null && i < 40; i++) {
        const prompt = Array.from({ length: 40 }, (_, k) => 5 + ((k * 7 + i * 13) % 90));
        const res = await fetch(`${url1}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 1 }),
        });
        assert.equal(res.status, 200);
        await res.text();
        frames = await sub.receive().catch(() => null);
      }
      assert.ok(frames, 'a KV events batch from rank 1');
      assert.equal(decodeBatch(frames[2] as Buffer).dataParallelRank, 1);
    } finally {
      sub.close();
    }
  } finally {
    server.stop();
  }
  const r = await server.run;
  assert.equal(r.code, 0, r.err);
});
