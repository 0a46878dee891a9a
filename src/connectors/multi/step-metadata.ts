/** MultiConnector's per-step payloads (plain data): each child's, in child order. */
import type { KVConnectorMetadata, KVConnectorWorkerMetadata } from '../../connector/types.ts';

/** Scheduler → workers: each child's metadata in child order, and the extra-save countdowns. */
export interface MultiConnectorMetadata {
  [key: string]: unknown;
  /** null only if the children were still loading when the step was planned. */
  metadata: KVConnectorMetadata[] | null;
  extraAsyncSaves: Record<string, number> | null;
}

/** Workers → scheduler: each child's worker metadata in child order. */
export interface MultiConnectorWorkerMetadata {
  [key: string]: unknown;
  metadata: (KVConnectorWorkerMetadata | null)[];
}
