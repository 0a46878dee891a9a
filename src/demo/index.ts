export { type CompletionResult, streamCompletion } from './client.ts';
export {
  DEMO_METRICS,
  type DemoMetricNames,
  demoMetricNames,
  type MetricReading,
  MORIIO_DEMO_METRICS,
  metricDelta,
  parseReading,
  readMetrics,
  sumMetric,
} from './metrics.ts';
export {
  DEMO_CONNECTORS,
  DEMO_DEFAULTS,
  type DemoConnector,
  type DemoOptions,
  demoFlow,
  exportsTransferMetrics,
  MORIIO_BACKENDS,
  type MoriioBackend,
  resolveDemoConnector,
  transferMode,
} from './options.ts';
export { ProcessGroup, type ServeProcess, startServe, waitHealthy } from './processes.ts';
export { type DemoIO, type DemoRun, runDemo } from './run-demo.ts';
export { type Servers, startServers } from './start-servers.ts';
export { type DemoSummary, nearestRankOf, renderTable, sameOutput, summarize } from './summary.ts';
export { type DemoTopology, kvBytesPerBlock, planTopology } from './topology.ts';
export { freeMoriioPorts, freePorts, type MoriioPorts } from './transfer-configs.ts';
export { buildWorkload, type DemoRequest, familyPrefix, workloadWaves } from './workload.ts';
