export { Backend } from './backend.ts';
export { BackendPool } from './backend-pool.ts';
export { type FlowPlan, planFlow } from './flow-plan.ts';
export { createPolicy, type RoutingPolicy } from './policies.ts';
export { chainedPrefixHashes, promptText } from './prefix-hash.ts';
export { type RunningProxy, resolveProxyOptions, startProxy } from './proxy-server.ts';
export * from './request-shaping.ts';
export * from './types.ts';
