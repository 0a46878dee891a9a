/**
 * MoRIIO service discovery against vLLM's side of it, written as vLLM writes it (pyzmq +
 * msgpack, test/connectors/moriio/fixtures/vllm_moriio_discovery.py): a kvconnect engine's
 * ping reaches a ROUTER that unpacks it as vLLM's MoRIIO toy proxy does (two frames, the
 * toy proxy's required keys, integer sizes), and a ping sent from a DEALER as vLLM's engines
 * send it registers with `kvconnect proxy`.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LLM } from '../../../src/engine/llm.ts';
import { setLogLevel } from '../../../src/logging/logger.ts';
import { freePort } from '../../helpers/free-port.ts';
import { waitFor } from '../../server/helpers/harness.ts';
import { moriioOptions, moriioPorts, startDiscoveryProxy } from './helpers.ts';

setLogLevel('error');

const SCRIPT = fileURLToPath(new URL('./fixtures/vllm_moriio_discovery.py', import.meta.url));
const PYTHON = '/usr/bin/python3';

/** Runs the fixture; resolves with its JSON lines once it exits. */
function runFixture(args: string[], onLine?: (line: Record<string, unknown>) => void) {
  const child = spawn(PYTHON, [SCRIPT, ...args]);
  const lines: Record<string, unknown>[] = [];
  let buffer = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    buffer += d.toString();
    let nl = buffer.indexOf('\n');
    while (nl >= 0) {
      const line = JSON.parse(buffer.slice(0, nl)) as Record<string, unknown>;
      buffer = buffer.slice(nl + 1);
      lines.push(line);
      onLine?.(line);
      nl = buffer.indexOf('\n');
    }
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<Record<string, unknown>[]>((resolve, reject) => {
    child.on('exit', (code) =>
      code === 0 ? resolve(lines) : reject(new Error(`fixture exit ${code}: ${stderr}`)),
    );
  });
  return { child, done };
}

describe('MoRIIO discovery with vLLM', () => {
  it("a kvconnect engine's ping is what vLLM's MoRIIO proxy unpacks", async () => {
    const port = await freePort();
    let listening!: () => void;
    const ready = new Promise<void>((r) => {
      listening = r;
    });
    const listener = runFixture(['listen', String(port), '20'], (l) => {
      if ('listening' in l) listening();
    });
    await ready;
    const ports = await moriioPorts();
    const llm = await LLM.create(
      moriioOptions({ readMode: false, backend: 'xgmi' }, 'kv_consumer', ports, {
        proxy_ip: '127.0.0.1',
        proxy_ping_port: port,
        http_port: 8124,
      }),
    );
    try {
      const lines = await listener.done;
      const pings = lines.filter((l) => 'ping' in l);
      assert.ok(pings.length >= 1, 'at least one ping arrived');
      const first = pings[0] as {
        frames: number;
        ping: Record<string, unknown>;
        types: Record<string, string>;
      };
      assert.equal(first.frames, 2, 'identity + one message, as the toy proxy unpacks it');
      assert.deepEqual(first.ping, {
        type: 'D',
        http_address: '127.0.0.1:8124',
        zmq_address: `host:127.0.0.1,handshake:${ports.handshakePort},notify:${ports.notifyPort}`,
        dp_size: 1,
        tp_size: 1,
        transfer_mode: 'WRITE',
      });
      assert.deepEqual(first.types, {
        type: 'str',
        http_address: 'str',
        zmq_address: 'str',
        dp_size: 'int',
        tp_size: 'int',
        transfer_mode: 'str',
      });
    } finally {
      listener.child.kill();
      await llm.shutdown();
    }
  });

  it("a ping sent as vLLM's engines send it registers with kvconnect proxy", async () => {
    const proxy = await startDiscoveryProxy();
    try {
      const hello = runFixture(['ping', String(proxy.discoveryPort), JSON.stringify({ type: 'HELLO' }), '1']);
      await hello.done;
      const ping = {
        type: 'P',
        http_address: '127.0.0.1:8125',
        zmq_address: 'host:127.0.0.1,handshake:6301,notify:6401',
        dp_size: 2,
        tp_size: 1,
        transfer_mode: 'READ',
      };
      const sender = runFixture(['ping', String(proxy.discoveryPort), JSON.stringify(ping), '3']);
      await sender.done;
      await waitFor(
        async () => proxy.pool.all().some((b) => b.url === 'http://127.0.0.1:8125'),
        5000,
        'the instance registered',
      );
      const listed = (await (await fetch(`${proxy.url}/instances`)).json()) as {
        instances: Array<Record<string, unknown>>;
      };
      assert.equal(listed.instances.length, 1, 'HELLO registers nothing');
      assert.equal(listed.instances[0]?.['role'], 'prefill');
      const backend = proxy.pool.all()[0];
      assert.equal(backend?.registration?.dpSize, 2);
      assert.equal(backend?.registration?.transferMode, 'READ');
    } finally {
      await proxy.close();
    }
  });
});
