/** Real P and D `kvconnect serve` processes with NixlConnector (pull) behind the proxy. */
import { test } from 'node:test';
import { startCluster } from './helpers.ts';
import {
  assertDecodeOnlyComputedLastToken,
  checkDisaggregatedMatchesPlain,
  type PdFigures,
} from './pd-shared.ts';

// D's READ can reach P before P's worker registered the read grant (the grant is added on
// P's next engine step, after its HTTP answer left), so a load sometimes fails. With
// kv_load_failure_policy=recompute the outputs must still be identical; the strict figures
// are tracked as a known bug until the NIXL connector closes the race.
const GRANT_RACE =
  'NIXL pull: READ can arrive before P registers its read grant (reported to the connector owner)';

test('NixlConnector through the proxy: same outputs as a plain server, P frees its KV', async (t) => {
  const cluster = await startCluster('NixlConnector', { kvLoadFailurePolicy: 'recompute' });
  let figures: PdFigures;
  try {
    figures = await checkDisaggregatedMatchesPlain(cluster);
  } finally {
    await cluster.close();
  }
  await t.test('D computed ≤ 1 prompt token per request, no failed transfer', { todo: GRANT_RACE }, () => {
    assertDecodeOnlyComputedLastToken(figures);
  });
});
