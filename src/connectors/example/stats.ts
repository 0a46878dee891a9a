/**
 * ExampleConnector's stats (docs/connectors/example.md): what the worker counted since the
 * last report, as the KVConnectorStatsData the engine aggregates.
 */

/** The worker's running counts (worker.ts). */
export interface ExampleWorkerCounters {
  loadedBlocks: number;
  savedBlocks: number;
  loadErrors: number;
  saveErrors: number;
}

export interface ExampleStatsData {
  num_loaded_blocks: number;
  num_saved_blocks: number;
  num_load_errors: number;
  num_save_errors: number;
}

export function emptyExampleCounters(): ExampleWorkerCounters {
  return { loadedBlocks: 0, savedBlocks: 0, loadErrors: 0, saveErrors: 0 };
}

/** The counts as stats; null when nothing happened. */
export function exampleStats(c: ExampleWorkerCounters): ExampleStatsData | null {
  if (c.loadedBlocks + c.savedBlocks + c.loadErrors + c.saveErrors === 0) return null;
  return {
    num_loaded_blocks: c.loadedBlocks,
    num_saved_blocks: c.savedBlocks,
    num_load_errors: c.loadErrors,
    num_save_errors: c.saveErrors,
  };
}
