import { test } from 'node:test';
import { LLM } from '../../src/engine/llm.ts';
import { moriioOptions, moriioPorts, runPair, waitForEmptyPool } from './moriio-fixtures/helpers.ts';

for (const readMode of [false, true]) test(`probe ${readMode}`, async () => {
  const spec = { readMode, backend: 'rdma' as const };
  const pPorts = await moriioPorts();
  const dPorts = await moriioPorts();
  const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
  const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
  try {
    const r = await runPair(p, d, pPorts, dPorts, spec);
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
    console.log(JSON.stringify((await p.engine()).engine.takeKvConnectorStats()));
    console.log(JSON.stringify((await d.engine()).engine.takeKvConnectorStats()));
    const mem = (await p.engine());
    console.log(Object.keys(mem), Object.keys(mem.engine));
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
});
