/**
 * Checks that a test file's agents leave no shm staging ring behind. Only this process's
 * rings count (their names carry its pid): other test files run at the same time.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after } from 'node:test';

function ownRings(): string[] {
  return readdirSync('/dev/shm').filter((f) => f.startsWith(`kvconnect-${process.pid}-`));
}

export function assertNoRingsLeftBehind(): void {
  after(() => assert.deepEqual(ownRings(), [], 'shm staging files must not be left behind'));
}
