/**
 * KV memory from allocateShared (src/util/shared-memory.ts): with the native addon every page
 * is made resident on a thread of its own right after the allocation (native/kvmem.cc), so no
 * forward pass or transfer takes a page fault on a block it touches first, and the caller's
 * writes made meanwhile are kept.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocateShared, mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { residentBytes } from '../helpers/resident.ts';
import { waitUntil } from '../helpers/wait-until.ts';

const skip = mappableSharedMemory ? false : 'no native addon: KV memory is a plain SharedArrayBuffer';
const MiB = 1 << 20;

describe('KV memory populated up front', () => {
  it('every page becomes resident without being touched, and the allocation does not wait for it', {
    skip,
  }, async () => {
    // A size no other mapping of this process has.
    const size = 24 * MiB + 3 * 4096;
    const t0 = performance.now();
    const buffer = allocateShared(size);
    const allocMs = performance.now() - t0;
    await waitUntil('all pages resident', () => residentBytes(size, 'rw-s') === size);
    assert.equal(buffer.byteLength, size);
    // Not a timing goal: populating 24 MiB page by page takes far longer than this on the
    // machines that need it, so returning this early shows it happens in the background.
    assert.ok(allocMs < 2000, `allocateShared took ${allocMs.toFixed(0)} ms`);
  });

  it('keeps what the caller writes while the pages are populated', { skip }, async () => {
    const size = 16 * MiB + 5 * 4096;
    const words = new Uint32Array(allocateShared(size));
    // From the end backwards: the writes cross the population, which runs forwards.
    for (let i = words.length - 1; i >= 0; i--) words[i] = (i * 2654435761) >>> 0 || 1;
    await waitUntil('all pages resident', () => residentBytes(size, 'rw-s') === size);
    let wrong = 0;
    for (let i = 0; i < words.length; i++) if (words[i] !== ((i * 2654435761) >>> 0 || 1)) wrong++;
    assert.equal(wrong, 0, 'words changed by the population');
  });
});
