/**
 * LoRA serving as vLLM's clients see it, against a `kvconnect serve` process: --lora-modules
 * (both forms) listed by /v1/models with `parent`, a request naming an adapter gets the
 * adapter's tokens (PyTorch's greedy continuation), an unknown model is vLLM's 404, runtime
 * load/unload (VLLM_ALLOW_RUNTIME_LORA_UPDATING) with vLLM's statuses and messages, paths
 * only below --lora-allowed-dirs, vllm:lora_requests_info, and an adapter above
 * --max-lora-rank stopping serve with vLLM's message.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readReference } from '../engine/model/helpers/oracle.ts';
import { captureOutput } from '../helpers/captured-child.ts';

const ENTRY = fileURLToPath(new URL('./fixtures/serve-entry.ts', import.meta.url));
const BASE = fileURLToPath(new URL('../engine/model/fixtures/hf/llama-gqa3-untied-f32', import.meta.url));
const ADAPTERS = fileURLToPath(new URL('../engine/lora/fixtures/', import.meta.url));
const R4 = join(ADAPTERS, 'all-targets-r4');
const R8 = join(ADAPTERS, 'qv-down-rslora-r8');

function run(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', ENTRY, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, KVCONNECT_LOG_LEVEL: 'error', ...env },
  });
  return { child, ...captureOutput(child) };
}

async function address(p: ReturnType<typeof run>): Promise<string> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(p.out())?.[1];
    if (url) return url;
    if (p.child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no address printed; stderr: ${p.err()}`);
}

/** The fields the tests read from completion and error bodies. */
interface Reply {
  model: string;
  choices: Array<{ token_ids: number[] }>;
  error: { message: string; type: string; param: string | null; code: number; kvconnect_code: string };
}

async function post(url: string, body: unknown) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, json: () => JSON.parse(text) as Reply };
}

describe('kvconnect serve with LoRA adapters', () => {
  let dir: string;
  let server: ReturnType<typeof run>;
  let url: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvconnect-lora-serve-'));
    mkdirSync(join(dir, 'allowed'));
    cpSync(R8, join(dir, 'allowed', 'r8'), { recursive: true });
    cpSync(R4, join(dir, 'outside-r4'), { recursive: true });
    symlinkSync(join(dir, 'outside-r4'), join(dir, 'allowed', 'link-out'));
    server = run(
      [
        '--port',
        '0',
        '--model',
        BASE,
        '--served-model-name',
        'base',
        '--max-model-len',
        '256',
        '--num-gpu-blocks',
        '64',
        '--enable-lora',
        '--max-loras',
        '2',
        '--max-lora-rank',
        '8',
        '--lora-modules',
        `r4=${R4}`,
        JSON.stringify({ name: 'r8', path: R8, base_model_name: 'base' }),
        '--lora-allowed-dirs',
        join(dir, 'allowed'),
      ],
      { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'true' },
    );
    url = await address(server);
  });
  after(async () => {
    if (server.child.exitCode === null) {
      server.child.kill('SIGTERM');
      await server.exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  test('/v1/models lists the adapters with their parent, root and no max_model_len', async () => {
    const models = (await (await fetch(`${url}/v1/models`)).json()) as {
      data: Array<Record<string, unknown>>;
    };
    assert.deepEqual(
      models.data.map((m) => [m.id, m.root, m.parent, m.max_model_len, m.object, m.owned_by]),
      [
        ['base', BASE, null, 256, 'model', 'vllm'],
        ['r4', R4, 'base', null, 'model', 'vllm'],
        ['r8', R8, 'base', null, 'model', 'vllm'],
      ],
    );
  });

  test("a request naming an adapter gets the adapter's tokens; the base model its own", async () => {
    for (const [model, ref] of [
      ['r4', readReference(R4)],
      ['r8', readReference(R8)],
      ['base', readReference(BASE)],
    ] as const) {
      const res = await post(`${url}/v1/completions`, {
        model,
        prompt: ref.prompts[1],
        max_tokens: 8,
        temperature: 0,
        ignore_eos: true,
        return_token_ids: true,
      });
      assert.equal(res.status, 200, res.text);
      const body = res.json();
      assert.equal(body.model, model);
      assert.deepEqual(body.choices[0]?.token_ids, ref.greedy[1], model);
    }
  });

  test("an unknown model is vLLM's 404 body", async () => {
    const res = await post(`${url}/v1/completions`, { model: 'nope', prompt: [1, 2, 3], max_tokens: 1 });
    assert.equal(res.status, 404);
    const { error } = res.json();
    assert.deepEqual(
      [error.message, error.type, error.param, error.code],
      ['The model `nope` does not exist.', 'NotFoundError', 'model', 404],
    );
  });

  test("runtime load and unload answer with vLLM's statuses and messages", async () => {
    const load = (body: unknown) => post(`${url}/v1/load_lora_adapter`, body);
    const unload = (body: unknown) => post(`${url}/v1/unload_lora_adapter`, body);
    const path = join(dir, 'allowed', 'r8');
    let res = await load({ lora_name: 'late', lora_path: path });
    assert.deepEqual([res.status, res.text], [200, "Success: LoRA adapter 'late' added successfully."]);
    const ref = readReference(R8);
    const out = await post(`${url}/v1/completions`, {
      model: 'late',
      prompt: ref.prompts[0],
      max_tokens: 8,
      temperature: 0,
      ignore_eos: true,
      return_token_ids: true,
    });
    assert.deepEqual(out.json().choices[0]?.token_ids, ref.greedy[0]);
    res = await load({ lora_name: 'late', lora_path: path });
    assert.equal(res.status, 400);
    assert.deepEqual(
      [res.json().error.message, res.json().error.type],
      [
        "The lora adapter 'late' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.",
        'InvalidUserInput',
      ],
    );
    res = await load({ lora_name: 'late', lora_path: path, load_inplace: true });
    assert.equal(res.status, 200);
    res = await load({ lora_name: 'x' });
    assert.deepEqual(
      [res.status, res.json().error.message],
      [400, "Both 'lora_name' and 'lora_path' must be provided."],
    );
    const missing = join(dir, 'allowed', 'none');
    res = await load({ lora_name: 'x', lora_path: missing });
    assert.deepEqual(
      [res.status, res.json().error.message, res.json().error.type],
      [404, `Loading lora x failed: No adapter found for ${missing}`, 'NotFoundError'],
    );
    res = await unload({ lora_name: 'late' });
    assert.deepEqual([res.status, res.text], [200, "Success: LoRA adapter 'late' removed successfully."]);
    res = await unload({ lora_name: 'late' });
    assert.deepEqual(
      [res.status, res.json().error.message],
      [404, "The lora adapter 'late' cannot be found."],
    );
    res = await unload({});
    assert.deepEqual(
      [res.status, res.json().error.message],
      [400, "'lora_name' needs to be provided to unload a LoRA adapter."],
    );
    const ids = ((await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> }).data;
    assert.deepEqual(
      ids.map((m) => m.id),
      ['base', 'r4', 'r8'],
    );
  });

  test('paths outside --lora-allowed-dirs are refused: .., absolute, symbolic link', async () => {
    for (const lora_path of [
      join(dir, 'allowed', '..', 'outside-r4'),
      join(dir, 'outside-r4'),
      join(dir, 'allowed', 'link-out'),
      `${join(dir, 'allowed')}-sibling`,
      '/etc',
    ]) {
      const res = await post(`${url}/v1/load_lora_adapter`, { lora_name: 'evil', lora_path });
      assert.equal(res.status, 400, lora_path);
      assert.equal(res.json().error.kvconnect_code, 'LORA_PATH_NOT_ALLOWED', lora_path);
    }
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    assert.ok(!models.data.some((m) => m.id === 'evil'));
  });

  test('vllm:lora_requests_info has max_lora and the adapters last seen running, set to a time', async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const rows = text.split('\n').filter((l) => l.startsWith('vllm:lora_requests_info{'));
    assert.ok(rows.length > 0, text.slice(0, 500));
    for (const row of rows) {
      const m =
        /^vllm:lora_requests_info\{max_lora="2",waiting_lora_adapters="([^"]*)",running_lora_adapters="([^"]*)"\} (\S+)$/.exec(
          row,
        );
      assert.ok(m, row);
      const t = Number(m[3]);
      assert.ok(t > 1.7e9 && t < Date.now() / 1000 + 1, row);
    }
    assert.ok(
      rows.some((r) => r.includes('running_lora_adapters="r4"')),
      rows.join('\n'),
    );
  });
});

describe('kvconnect serve refuses what vLLM refuses', () => {
  test("an adapter above --max-lora-rank stops serve with vLLM's message", async () => {
    const p = run([
      '--port',
      '0',
      '--model',
      BASE,
      '--enable-lora',
      '--max-lora-rank',
      '1',
      '--lora-modules',
      `r4=${R4}`,
    ]);
    assert.equal(await p.exited, 2);
    assert.match(p.err(), /LoRA rank 4 is greater than max_lora_rank 1\./);
    assert.doesNotMatch(p.out(), /listening/);
  });

  test('--lora-modules without --enable-lora, and a bad module spec, exit 2 naming the fix', async () => {
    let p = run(['--port', '0', '--model', BASE, '--lora-modules', `r4=${R4}`]);
    assert.equal(await p.exited, 2);
    assert.match(
      p.err(),
      /error\[LORA_CONFIG_INVALID\]: --lora-modules and --lora-allowed-dirs need --enable-lora/,
    );
    p = run(['--port', '0', '--model', BASE, '--enable-lora', '--lora-modules', 'no-equals-sign']);
    assert.equal(await p.exited, 2);
    assert.match(p.err(), /Invalid format for --lora-modules/);
  });

  test("emulation without weights (--mode random, the sim's YAML): adapters are names, served alike", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvconnect-lora-sim-'));
    const yaml = join(dir, 'sim.yaml');
    writeFileSync(
      yaml,
      ['max-loras: 1', 'lora-modules:', `- '{"name":"tweets","path":"/nowhere/tweets"}'`, ''].join('\n'),
    );
    const p = run(['--port', '0', '--model', 'tiny', '--mode', 'random', '--config', yaml]);
    try {
      const url = await address(p);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as {
        data: Array<Record<string, unknown>>;
      };
      assert.deepEqual(
        models.data.map((m) => [m.id, m.parent, m.root]),
        [
          ['tiny', null, 'tiny'],
          ['tweets', 'tiny', '/nowhere/tweets'],
        ],
      );
      const res = await post(`${url}/v1/completions`, {
        model: 'tweets',
        prompt: 'hello there',
        max_tokens: 3,
      });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().model, 'tweets');
      const text = await (await fetch(`${url}/metrics`)).text();
      assert.match(
        text,
        /vllm:lora_requests_info\{max_lora="1",waiting_lora_adapters="",running_lora_adapters="tweets"\}/,
      );
    } finally {
      p.child.kill('SIGTERM');
      await p.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('without VLLM_ALLOW_RUNTIME_LORA_UPDATING the load route does not exist', async () => {
    const p = run(['--port', '0', '--model', BASE, '--enable-lora'], {
      VLLM_ALLOW_RUNTIME_LORA_UPDATING: '',
    });
    try {
      const url = await address(p);
      const res = await post(`${url}/v1/load_lora_adapter`, { lora_name: 'a', lora_path: R4 });
      assert.equal(res.status, 404);
    } finally {
      p.child.kill('SIGTERM');
      await p.exited;
    }
  });
});
