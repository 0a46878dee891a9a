export { type CompletionResult, streamCompletion } from './client.ts';
export { type MetricReading, metricDelta, parseReading, readMetrics, sumMetric } from './metrics.ts';
export {
  DEMO_CONNECTORS,
  DEMO_DEFAULTS,
  type DemoConnector,
  type DemoOptions,
  demoFlow,
  resolveDemoConnector,
} from './options.ts';
export { ProcessGroup, type ServeProcess, startServe, waitHealthy } from './processes.ts';
export { type DemoIO, type DemoRun, runDemo } from './run-demo.ts';
export { type DemoSummary, percentile, renderTable, sameOutput, summarize } from './summary.ts';
export { buildWorkload, type DemoRequest, familyPrefix, workloadWaves } from './workload.ts';
