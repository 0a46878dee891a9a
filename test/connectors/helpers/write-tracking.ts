/** Shared by the write-tracking tests of the NIXL and MoRIIO connectors. */
import assert from 'node:assert/strict';
import type { KVConnectorBase } from '../../../src/connector/base.ts';
import type { LLM } from '../../../src/engine/llm.ts';
import { LocalExecutor } from '../../../src/engine/runner/local-executor.ts';
import type { PagedKVMemory } from '../../../src/kv/interfaces.ts';

/** The rank-0 runner's KV memory and worker connector of an engine with tp=1. */
export async function runner(llm: LLM): Promise<{ kv: PagedKVMemory; connector: KVConnectorBase }> {
  const executor = (await llm.engine()).engine.executor;
  assert.ok(executor instanceof LocalExecutor, 'tp=1 runs the model in this process');
  const { kv, connector } = executor.runner;
  assert.ok(connector, 'the worker connector is there');
  return { kv, connector };
}

/** Counts the blocks whose load the connector reports as failed (vLLM's get_block_ids_with_load_errors). */
export function countLoadErrors(connector: KVConnectorBase): () => number {
  let n = 0;
  const real = connector.getBlockIdsWithLoadErrors.bind(connector);
  connector.getBlockIdsWithLoadErrors = () => {
    const ids = real();
    n += ids.length;
    return ids;
  };
  return () => n;
}

/**
 * After the connector records the blocks a forward pass filled, flips one byte of the first of
 * them (an engine writing a block after its record, which the receiver's check must catch).
 * Returns how many times it did.
 */
export function changeAfterFill(connector: KVConnectorBase, kv: PagedKVMemory, byte: number): () => number {
  let changed = 0;
  const real = connector.kvBlocksFilled.bind(connector);
  connector.kvBlocksFilled = (ids) => {
    real(ids);
    const view = kv.blockRange(0, ids[0]!, 1);
    view[byte] = view[byte]! ^ 0x40;
    changed++;
  };
  return () => changed;
}
