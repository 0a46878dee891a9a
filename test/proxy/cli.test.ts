import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Command } from 'commander';
import { registerProxyCommand } from '../../src/cli/commands/proxy.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import type { RunningProxy } from '../../src/proxy/index.ts';
import { decodeResponder, prefillResponder, UpstreamDouble } from './helpers/upstream-double.ts';

setLogLevel('silent');

test('kvconnect proxy: flags reach the proxy; repeated --prefill adds backends', async () => {
  const p1 = await UpstreamDouble.start(prefillResponder());
  const p2 = await UpstreamDouble.start(prefillResponder());
  const d = await UpstreamDouble.start(decodeResponder());
  let proxy: RunningProxy | undefined;
  const program = new Command().exitOverride();
  registerProxyCommand(program, { onStarted: (p) => (proxy = p) });
  await program.parseAsync(
    [
      'proxy',
      '--prefill',
      p1.url,
      '--prefill',
      p2.url,
      '--decode',
      d.url,
      '--port',
      '0',
      '--policy',
      'least_loaded',
      '--kv-connector',
      'NixlConnector',
    ],
    { from: 'user' },
  );
  try {
    assert.ok(proxy);
    assert.equal(proxy.pool.all('prefill').length, 2);
    const h = (await (await fetch(`${proxy.url}/healthcheck`)).json()) as Record<string, unknown>;
    assert.deepEqual(h, { status: 'ok', prefill_instances: 2, decode_instances: 1 });
  } finally {
    await proxy?.close();
    for (const x of [p1, p2, d]) await x.close();
  }
});

test('kvconnect proxy: an unknown policy or connector is rejected by the parser', async () => {
  for (const args of [
    ['proxy', '--port', '0', '--policy', 'random'],
    ['proxy', '--port', '0', '--kv-connector', 'P2pNcclConnector'],
    ['proxy', '--port', '-1'],
    ['proxy', '--port', '0', '--kv-aware-overlap-credit', '-1'],
    ['proxy', '--port', '0', '--kv-aware-running-cost', 'lots'],
  ]) {
    const program = new Command().exitOverride().configureOutput({ writeErr: () => undefined });
    registerProxyCommand(program);
    await assert.rejects(program.parseAsync(args, { from: 'user' }), /invalid|must be/i);
  }
});
