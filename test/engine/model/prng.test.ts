import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../../../src/engine/model/prng.ts';

test('fillGaussian writes what a loop of nextGaussian writes, and leaves the generator where that loop does', () => {
  for (const [std, mean] of [
    [0.02, 0],
    [0.05, 1],
  ] as const) {
    const loop = new SeededRandom(7);
    const want = new Float32Array(1001);
    for (let i = 0; i < want.length; i++)
      want[i] = mean === 0 ? std * loop.nextGaussian() : mean + std * loop.nextGaussian();
    const filled = new SeededRandom(7);
    const got = new Float32Array(want.length);
    filled.fillGaussian(got, std, mean);
    assert.deepEqual(
      new Uint8Array(got.buffer),
      new Uint8Array(want.buffer),
      `std ${std}, mean ${mean}: same bits`,
    );
    assert.equal(filled.nextUint32(), loop.nextUint32(), 'the next draw is the same');
  }
});
