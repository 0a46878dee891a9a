/**
 * Test-only hooks for the workers' transfer agents (e.g. corrupting one outgoing byte after
 * its checksum was computed). Production code never sets them.
 */
import type { TransferAgentOptions } from '../../transfer/index.ts';

export type NixlTestHooks = NonNullable<TransferAgentOptions['testHooks']>;

let hooks: NixlTestHooks | undefined;

export function setNixlTestHooks(next: NixlTestHooks | undefined): void {
  hooks = next;
}

export function nixlTestHooks(): NixlTestHooks | undefined {
  return hooks;
}
