export { type ExternalHitDecision, resolveExternalHit, truncateComputedBlocks } from './external-hit.ts';
export { KVOutputAggregator } from './kv-output-aggregator.ts';
export { KV_LOAD_FAILED, Scheduler } from './scheduler.ts';
export type {
  EngineCoreOutput,
  ResolvedSchedulerOptions,
  SchedulerOptions,
  SchedulerStats,
  SchedulerUpdate,
} from './types.ts';
