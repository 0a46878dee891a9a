/**
 * The offload bench's Redis comparison: the RedisTier's put/get and redis-benchmark's SET/GET
 * with the same client count (1 connection) and pipelining (16), as values per second.
 */
import { execFileSync } from 'node:child_process';
import { RedisTier } from '../src/connectors/offloading/redis-tier.ts';

export interface OpsPerSecond {
  put: number;
  get: number;
}

/** RedisTier put and get, pipelined batches of 16 on its one connection: values per second. */
export async function tierThroughput(url: string, valueBytes: number, n: number): Promise<OpsPerSecond> {
  const tier = new RedisTier({ url, clusterNodes: [], timeoutMs: 30_000, keyPrefix: 'bench' });
  const value = new Uint8Array(valueBytes).fill(7);
  const batch = 16;
  const keys = Array.from({ length: batch }, (_, i) => `k${i}`);
  try {
    await tier.putMany(keys.map((key) => ({ key, value })));
    let t0 = performance.now();
    for (let done = 0; done < n; done += batch) await tier.putMany(keys.map((key) => ({ key, value })));
    const putS = (performance.now() - t0) / 1000;
    t0 = performance.now();
    for (let done = 0; done < n; done += batch) {
      const got = await tier.getMany(keys);
      if (got.some((v) => v === null || v.byteLength !== valueBytes))
        throw new Error('redis tier get returned a miss');
    }
    const getS = (performance.now() - t0) / 1000;
    const values = Math.ceil(n / batch) * batch;
    return { put: values / putS, get: values / getS };
  } finally {
    await tier.close();
  }
}

/** redis-benchmark SET and GET with the tier's client count (1) and pipelining (16): requests/s. */
export function redisBenchmark(port: number, size: number, n: number): OpsPerSecond {
  const csv = execFileSync(
    'redis-benchmark',
    [
      '-h',
      '127.0.0.1',
      '-p',
      String(port),
      '-t',
      'set,get',
      '-d',
      String(size),
      '-n',
      String(n),
      '-c',
      '1',
      '-P',
      '16',
      '--csv',
    ],
    { encoding: 'utf8' },
  );
  const rps = (test: string): number => {
    const line = csv.split('\n').find((l) => l.startsWith(`"${test}"`));
    if (!line) throw new Error(`redis-benchmark printed no ${test} line:\n${csv}`);
    return Number(JSON.parse(`[${line}]`)[1]);
  };
  return { put: rps('SET'), get: rps('GET') };
}
