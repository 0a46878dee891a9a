/** The demo's server command lines per connector: the MoRIIO ports, modes and the proxy flow. */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { DEMO_DEFAULTS, type DemoOptions } from '../../src/demo/options.ts';
import { planTopology } from '../../src/demo/topology.ts';
import { freePorts } from '../../src/demo/transfer-configs.ts';

function flag(args: readonly string[], name: string): string {
  const i = args.indexOf(name);
  assert.ok(i >= 0 && i + 1 < args.length, `${name} missing in ${args.join(' ')}`);
  return args[i + 1] as string;
}

function transferConfig(args: readonly string[]): {
  kv_connector: string;
  kv_role: string;
  kv_connector_extra_config: Record<string, unknown>;
} {
  return JSON.parse(flag(args, '--kv-transfer-config'));
}

const options = (over: Partial<DemoOptions>): DemoOptions => ({ ...DEMO_DEFAULTS, ...over });

test('freePorts hands out distinct ports that can be listened on', async () => {
  const ports = await freePorts(6);
  assert.equal(new Set(ports).size, 6);
  for (const port of ports) {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('MoRIIO: http_port is the port the server listens on; P and D get their own distinct ports', async () => {
  const t = await planTopology('MoRIIOConnector', options({ kvLeaseDuration: 17 }));
  const p = transferConfig(t.prefillArgs);
  const d = transferConfig(t.decodeArgs);
  assert.equal(p.kv_connector, 'MoRIIOConnector');
  assert.equal(p.kv_role, 'kv_producer');
  assert.equal(d.kv_role, 'kv_consumer');
  const pe = p.kv_connector_extra_config;
  const de = d.kv_connector_extra_config;
  assert.equal(pe['http_port'], Number(flag(t.prefillArgs, '--port')));
  assert.equal(de['http_port'], Number(flag(t.decodeArgs, '--port')));
  const ports = [pe, de].flatMap((e) => [e['http_port'], e['handshake_port'], e['notify_port']]);
  assert.ok(ports.every((n) => typeof n === 'number' && n > 0));
  assert.equal(new Set(ports).size, 6, `ports collide: ${ports.join(', ')}`);
  assert.equal(pe['backend'], 'xgmi');
  assert.equal(pe['read_mode'], false);
  assert.equal(pe['host_ip'], '127.0.0.1');
  assert.equal(pe['defer_timeout'], 17);
  assert.equal(pe['side_channel_port'], undefined, 'no NIXL options for MoRIIO');
  assert.equal(t.prefillEngineId, `127.0.0.1:${pe['handshake_port']}`);
  assert.equal(t.proxyFlow, 'MoRIIOConnector');
  assert.equal(t.moriioMode, 'WRITE');
  assert.equal(flag(t.referenceArgs, '--port'), '0');
  assert.ok(!t.referenceArgs.includes('--kv-transfer-config'));
});

test('MoRIIO READ / rdma reach both servers and the proxy', async () => {
  const t = await planTopology('MoRIIOConnector', options({ moriioReadMode: true, moriioBackend: 'rdma' }));
  for (const args of [t.prefillArgs, t.decodeArgs]) {
    const extra = transferConfig(args).kv_connector_extra_config;
    assert.equal(extra['read_mode'], true);
    assert.equal(extra['backend'], 'rdma');
  }
  assert.equal(t.moriioMode, 'READ');
});

test('NIXL: pull learns the side channel later, push fixes it up front; no MoRIIO options', async () => {
  const pull = await planTopology('NixlConnector', options({}));
  assert.equal(pull.proxyFlow, 'NixlConnector');
  assert.equal(pull.moriioMode, undefined);
  assert.deepEqual(pull.push, {});
  assert.equal(flag(pull.prefillArgs, '--port'), '0');
  assert.equal(transferConfig(pull.prefillArgs).kv_connector_extra_config['http_port'], undefined);
  const push = await planTopology('NixlPushConnector', options({}));
  const side = transferConfig(push.prefillArgs).kv_connector_extra_config['side_channel_port'];
  assert.ok(typeof side === 'number' && side > 0);
  assert.equal(push.push.port, side);
  assert.equal(push.proxyFlow, 'NixlPushConnector');
  const alias = await planTopology('NixlPullConnector', options({}));
  assert.equal(alias.proxyFlow, 'NixlConnector');
});
