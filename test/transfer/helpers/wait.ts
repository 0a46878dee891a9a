/** Condition waits for the transfer tests: poll until true, fail with what was awaited. */
import assert from 'node:assert/strict';
import type { TransferHandle, TransferStatus } from '../../../src/transfer/index.ts';

export async function until(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Drains notifications until `count` arrived (they may come a little after the transfer completed). */
export async function notificationsOf(
  agent: { drainNotifications(): { agent: string; message: string }[] },
  count: number,
): Promise<{ agent: string; message: string }[]> {
  const got: { agent: string; message: string }[] = [];
  await until(() => {
    got.push(...agent.drainNotifications());
    return got.length >= count;
  }, `${count} notification(s)`);
  return got;
}

/** Waits for a transfer to leave PROC, releases its handle and returns its final status. */
export async function finished(
  agent: { waitFor(h: TransferHandle): Promise<TransferStatus>; releaseHandle(h: TransferHandle): void },
  h: TransferHandle,
): Promise<TransferStatus> {
  const s = await agent.waitFor(h);
  agent.releaseHandle(h);
  return s;
}
