/** Real P and D `kvconnect serve` processes with NixlPushConnector behind the proxy. */
import { test } from 'node:test';
import { startCluster } from './helpers/cluster.ts';
import { assertDecodeOnlyComputedLastToken, checkDisaggregatedMatchesPlain } from './helpers/pd-shared.ts';

test('NixlPushConnector through the proxy: same outputs as a plain server, D computes ≤ 1 token, P frees its KV', async () => {
  const cluster = await startCluster('NixlPushConnector');
  try {
    assertDecodeOnlyComputedLastToken(await checkDisaggregatedMatchesPlain(cluster));
  } finally {
    await cluster.close();
  }
});
