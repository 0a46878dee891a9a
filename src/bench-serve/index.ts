export {
  type BenchSummary,
  type Distribution,
  distribution,
  interpolatedPercentile,
  summarize,
} from './metrics.ts';
export { BENCH_SERVE_DEFAULTS, type BenchServeOptions, resolveBenchOptions } from './options.ts';
export { type PlannedRequest, randomRequests, traceRequests } from './prompts.ts';
export { formatTable, resultJson } from './report.ts';
export { type BenchRun, planRequests, runBenchServe } from './runner.ts';
export { type RequestResult, sendStreaming } from './sse-client.ts';
export { latencySvg } from './svg.ts';
export {
  loadTrace,
  type ParsedTrace,
  parseTrace,
  TRACE_BLOCK_TOKENS,
  type TraceEntry,
  type TraceProblem,
} from './trace.ts';
