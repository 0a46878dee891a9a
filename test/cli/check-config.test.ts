import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { runCli } from '../../src/cli/program.ts';

const FIXTURE = './test/fixtures/external-connector.mjs';
const HMA_MESSAGE =
  'Connector ExampleConnector does not support HMA but HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.';

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCli(argv, {
    out: (t) => {
      out += t;
    },
    err: (t) => {
      err += t;
    },
  });
  return { code, out, err };
}
const kv = (o: Record<string, unknown>) => ['--kv-transfer-config', JSON.stringify(o)];

test('missing transfer config: exit 2 with vLLM message and a hint', async () => {
  const r = await cli('check-config');
  assert.equal(r.code, 2);
  assert.match(
    r.err,
    /^error\[KV_TRANSFER_CONFIG_MISSING\]: kv_transfer_config must be set to create a connector\nhint: /,
  );
  const noName = await cli('check-config', ...kv({ kv_role: 'kv_both' }));
  assert.match(noName.err, /Connector name is not set in KVTransferConfig/);
});

test('NixlConnectorV1 and a wrong-case name: message then did-you-mean hint', async () => {
  for (const name of ['NixlConnectorV1', 'nixlconnector']) {
    const r = await cli('check-config', ...kv({ kv_connector: name, kv_role: 'kv_producer' }));
    assert.equal(r.code, 2);
    assert.match(
      r.err,
      new RegExp(`Unsupported connector type: ${name}\\nhint: did you mean 'NixlConnector'\\?`),
    );
  }
});

test('kv_role missing and unknown keys fail with exit 2', async () => {
  const role = await cli('check-config', ...kv({ kv_connector: 'NixlConnector' }));
  assert.equal(role.code, 2);
  assert.ok(
    role.err.includes(
      "Please specify kv_role when kv_connector is set, supported roles are ('kv_producer', 'kv_both', 'kv_consumer')",
    ),
  );
  const unknown = await cli(
    'check-config',
    ...kv({ kv_connector: 'NixlConnector', kv_role: 'kv_both', backend: 'x' }),
  );
  assert.equal(unknown.code, 2);
  assert.match(unknown.err, /Unknown field 'backend'/);
});

test('external connector via kv_connector_module_path works; an empty path fails', async () => {
  const ok = await cli(
    'check-config',
    ...kv({ kv_connector: 'MyExternalConnector', kv_role: 'kv_both', kv_connector_module_path: FIXTURE }),
    '--json',
  );
  assert.equal(ok.code, 0, ok.err);
  const report = JSON.parse(ok.out);
  assert.equal(report.connector.status, 'external');
  assert.deepEqual(report.connector.extraConfig, { greeting: 'hello' });
  const empty = await cli(
    'check-config',
    ...kv({ kv_connector: 'MyExternalConnector', kv_role: 'kv_both', kv_connector_module_path: '' }),
  );
  assert.equal(empty.code, 2);
  assert.match(empty.err, /kv_connector_module_path cannot be an empty string\.\nhint: /);
});

test('HMA forced on with a non-HMA connector on tiny-hybrid fails; --disable-hybrid-kv-cache-manager fixes it', async () => {
  const conf = kv({ kv_connector: 'ExampleConnector', kv_role: 'kv_both' });
  const forced = await cli(
    'check-config',
    '--model',
    'tiny-hybrid',
    '--no-disable-hybrid-kv-cache-manager',
    ...conf,
  );
  assert.equal(forced.code, 2);
  assert.ok(forced.err.includes(`: ${HMA_MESSAGE}\nhint: `), forced.err);
  const fixed = await cli(
    'check-config',
    '--model',
    'tiny-hybrid',
    '--disable-hybrid-kv-cache-manager',
    ...conf,
    '--json',
  );
  assert.equal(fixed.code, 0, fixed.err);
  assert.deepEqual(
    [JSON.parse(fixed.out).hma.enabled, JSON.parse(fixed.out).hma.reason],
    [false, 'explicitly-disabled'],
  );
});

test('auto HMA in the report: off with the warning for non-HMA, on for Nixl and a Multi of HMA children', async () => {
  const example = await cli(
    'check-config',
    '--model',
    'tiny-hybrid',
    ...kv({ kv_connector: 'ExampleConnector', kv_role: 'kv_both' }),
    '--json',
  );
  const r1 = JSON.parse(example.out);
  assert.equal(r1.hma.enabled, false);
  assert.ok(r1.warnings.some((w: string) => w.startsWith('Turning off hybrid kv cache manager because')));
  const multi = {
    kv_connector: 'MultiConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: {
      connectors: [
        { kv_connector: 'NixlConnector', kv_role: 'kv_both' },
        {
          kv_connector: 'OffloadingConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { cpu_bytes_to_use: 1 << 26 },
        },
      ],
    },
  };
  const r2 = JSON.parse((await cli('check-config', '--model', 'tiny-hybrid', ...kv(multi), '--json')).out);
  assert.equal(r2.hma.enabled, true);
  assert.equal(r2.connector.children.length, 2);
  const text = await cli(
    'check-config',
    '--model',
    'tiny-hybrid',
    ...kv({ kv_connector: 'NixlConnector', kv_role: 'kv_producer' }),
  );
  assert.equal(text.code, 0);
  assert.match(text.out, /HMA: +on \(auto: on, NixlConnector supports HMA\)/);
});

test('MoRIIO through check-config (dotted form): bad backends fail, good ones pass, http_port required', async () => {
  const moriio = (extra: string[]) =>
    cli(
      'check-config',
      '--kv-transfer-config.kv_connector',
      'MoRIIOConnector',
      '--kv-transfer-config.kv_role',
      'kv_consumer',
      ...extra,
      '--json',
    );
  const port = ['--kv-transfer-config.kv_connector_extra_config.http_port', '8000'];
  for (const [backend, shown] of [
    ['tcp', 'tcp'],
    ['TCP', 'tcp'],
    ['Rdma ', 'rdma '],
    ['nvlink', 'nvlink'],
  ]) {
    const r = await moriio([...port, '--kv-transfer-config.kv_connector_extra_config.backend', backend!]);
    assert.equal(r.code, 2, backend);
    assert.ok(
      r.err.includes(
        `Invalid MoRIIO backend '${shown}' in kv_connector_extra_config; must be one of 'rdma' or 'xgmi'.`,
      ),
      r.err,
    );
  }
  for (const backend of ['rdma', 'XGMI', null]) {
    const r = await moriio(
      backend === null ? port : [...port, '--kv-transfer-config.kv_connector_extra_config.backend', backend],
    );
    assert.equal(r.code, 0, r.err);
    assert.equal(JSON.parse(r.out).connector.extraConfig.backend, (backend ?? 'rdma').toLowerCase());
  }
  const noPort = await moriio([]);
  assert.equal(noPort.code, 2);
  assert.match(noPort.err, /http_port/);
});

test('usage errors exit 2; the real binary runs end to end (spawned)', async () => {
  assert.equal((await cli('check-config', '--bogus')).code, 2);
  assert.equal((await cli('no-such-command')).code, 2);
  const run = promisify(execFile);
  const ok = await run(process.execPath, [
    '--import',
    'tsx',
    'src/cli/main.ts',
    'check-config',
    '--kv-transfer-config',
    JSON.stringify({ kv_connector: 'MyHMAConnector', kv_role: 'kv_both', kv_connector_module_path: FIXTURE }),
    '--model',
    'tiny-hybrid',
  ]);
  assert.match(ok.stdout, /connector: +MyHMAConnector \[external: /);
  assert.match(ok.stdout, /HMA: +on/);
  const bad = await run(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'check-config']).catch(
    (e) => e,
  );
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /kv_transfer_config must be set to create a connector/);
  const help = await run(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'check-config', '--help']);
  assert.match(help.stdout, /--disable-hybrid-kv-cache-manager/);
  assert.match(help.stdout, /--no-disable-hybrid-kv-cache-manager/);
  assert.match(help.stdout, /--block-size <n>/);
});

test('unknown and ignored extra-config keys are warned about, for the parent and for each child', async () => {
  const nixl = await cli(
    'check-config',
    ...kv({
      kv_connector: 'NixlConnector',
      kv_role: 'kv_producer',
      kv_connector_extra_config: { kv_lease_duratoin: 10, enable_cross_layers_blocks: 'True' },
    }),
    '--json',
  );
  assert.equal(nixl.code, 0, nixl.err);
  const warnings = JSON.parse(nixl.out).warnings as string[];
  assert.ok(
    warnings.some(
      (w) =>
        w.startsWith(
          "Unknown key 'kv_lease_duratoin' in kv_connector_extra_config of NixlConnector is ignored",
        ) && w.includes("did you mean 'kv_lease_duration'?"),
    ),
    warnings.join('\n'),
  );
  assert.ok(
    warnings.some((w) =>
      w.startsWith('NixlConnector ignores kv_connector_extra_config.enable_cross_layers_blocks'),
    ),
  );
  const text = await cli(
    'check-config',
    ...kv({
      kv_connector: 'MultiConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: {
        connectors: [
          {
            kv_connector: 'OffloadingConnector',
            kv_role: 'kv_both',
            kv_connector_extra_config: { cpu_bytes_to_use: 1 << 26, eviction: 'arc' },
          },
        ],
      },
    }),
  );
  assert.equal(text.code, 0, text.err);
  assert.match(
    text.out,
    /warning: Unknown key 'eviction' in kv_connector_extra_config of OffloadingConnector/,
  );
  const clean = await cli(
    'check-config',
    ...kv({ kv_connector: 'NixlConnector', kv_role: 'kv_producer' }),
    '--json',
  );
  assert.deepEqual(JSON.parse(clean.out).warnings, []);
});

test('extra-config booleans follow one rule in every connector', async () => {
  const check = (connector: string, extra: Record<string, unknown>) =>
    cli(
      'check-config',
      ...kv({ kv_connector: connector, kv_role: 'kv_both', kv_connector_extra_config: extra }),
      '--json',
    );
  const nixl = await check('NixlConnector', { transfer_thread: 'TRUE', enforce_handshake_compat: 'false' });
  assert.equal(nixl.code, 0, nixl.err);
  const opts = JSON.parse(nixl.out).connector.extraConfig;
  assert.deepEqual([opts.transferThread, opts.enforceHandshakeCompat], [true, false]);
  const off = await check('OffloadingConnector', {
    cpu_bytes_to_use: 1 << 26,
    offload_prompt_only: ' False ',
  });
  assert.equal(JSON.parse(off.out).connector.extraConfig.offloadPromptOnly, false);
  const mor = await check('MoRIIOConnector', { http_port: 8000, read_mode: 'TRUE' });
  assert.equal(JSON.parse(mor.out).connector.extraConfig.readMode, true);
  for (const [connector, extra, key] of [
    ['NixlConnector', { transfer_thread: 'yes' }, 'transfer_thread'],
    ['OffloadingConnector', { cpu_bytes_to_use: 1 << 26, offload_prompt_only: 'no' }, 'offload_prompt_only'],
    ['MoRIIOConnector', { http_port: 8000, read_mode: 'on' }, 'read_mode'],
  ] as const) {
    const r = await check(connector, extra);
    assert.equal(r.code, 2, `${connector} ${key}`);
    assert.match(
      r.err,
      new RegExp(`Invalid value for kv_connector_extra_config\\.${key}: expected true or false`),
    );
  }
});
