import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../../src/engine/llm.ts';
import { moriioOptions, moriioPorts, startDiscoveryProxy } from './helpers.ts';

const CLI = fileURLToPath(new URL('../../../src/cli/main.ts', import.meta.url));

describe('MoRIIO config errors end to end (seed 004)', () => {
  it("`kvconnect serve` with backend 'tcp' exits 2 before listening, with vLLM message and the hint", async () => {
    const config = {
      kv_connector: 'MoRIIOConnector',
      kv_role: 'kv_producer',
      kv_connector_extra_config: { backend: 'tcp', notify_port: 5555, http_port: 8000 },
    };
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        CLI,
        'serve',
        '--model',
        'tiny',
        '--port',
        '0',
        '--kv-transfer-config',
        JSON.stringify(config),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (c) => {
      out += String(c);
    });
    child.stderr.on('data', (c) => {
      out += String(c);
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    assert.equal(code, 2);
    assert.ok(
      out.includes(
        "Invalid MoRIIO backend 'tcp' in kv_connector_extra_config; must be one of 'rdma' or 'xgmi'.",
      ),
      out,
    );
    assert.match(out, /hint: Use "backend": "rdma" between nodes or "backend": "xgmi" within one node/);
    assert.doesNotMatch(out, /listening/i, 'the server never started listening');
  });
});

describe('MoRIIO service discovery', () => {
  it('the scheduler pings a real proxy discovery port; the proxy registers the instance', async () => {
    const proxy = await startDiscoveryProxy();
    const ports = await moriioPorts();
    const llm = await LLM.create(
      moriioOptions({ readMode: true, backend: 'xgmi' }, 'kv_producer', ports, {
        proxy_ip: '127.0.0.1',
        proxy_ping_port: proxy.discoveryPort,
        http_port: 8123,
      }),
    );
    try {
      const deadline = Date.now() + 5000;
      let instances: Record<string, unknown>[] = [];
      while (Date.now() < deadline) {
        const res = await fetch(`${proxy.url}/instances`);
        instances = ((await res.json()) as { instances: Record<string, unknown>[] }).instances;
        if (instances.length > 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(instances.length, 1, 'one instance registered');
      assert.equal(instances[0]?.['url'], 'http://127.0.0.1:8123');
      assert.equal(instances[0]?.['role'], 'prefill');
      const backend = proxy.pool.all().find((b) => b.url === 'http://127.0.0.1:8123');
      assert.deepEqual(backend?.registration?.zmqAddress, {
        host: '127.0.0.1',
        handshakePort: ports.handshakePort,
        notifyPort: ports.notifyPort,
      });
      assert.equal(backend?.registration?.transferMode, 'READ');
    } finally {
      await llm.shutdown();
      await proxy.close();
    }
  });
});
