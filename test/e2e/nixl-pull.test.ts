/** Real P and D `kvconnect serve` processes with NixlConnector (pull) behind the proxy. */
import { test } from 'node:test';
import { startCluster } from './helpers/cluster.ts';
import { assertDecodeOnlyComputedLastToken, checkDisaggregatedMatchesPlain } from './helpers/pd-shared.ts';

// kv_load_failure_policy=fail: a failed load would fail the request, so identical outputs
// plus the strict figures mean D loaded every prompt from P. D's READ may reach P before
// P's worker created the read grant (one engine step after P answered); P holds such a READ
// until the grant appears instead of refusing it.
test('NixlConnector through the proxy: same outputs as a plain server, D loads everything, P frees its KV', async () => {
  const cluster = await startCluster('NixlConnector', { kvLoadFailurePolicy: 'fail' });
  try {
    assertDecodeOnlyComputedLastToken(await checkDisaggregatedMatchesPlain(cluster));
  } finally {
    await cluster.close();
  }
});
