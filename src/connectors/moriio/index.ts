/**
 * MoRIIOConnector on kvconnect's transfer agent (docs/connectors/moriio.md). Loaded lazily by
 * the registry.
 */
export * from './ack-reconciler.ts';
export * from './addressing.ts';
export * from './config.ts';
export { MoRIIOConnector, RDMA_AS_TCP_NOTICE } from './connector.ts';
export * from './discovery.ts';
export * from './events.ts';
export type { MoRIIOAgentPayload } from './handshake.ts';
export { type NotifyMessage, NotifyServer, type RemoteBlocksMessage, sendNotify } from './notify-channel.ts';
export * from './stats.ts';
export type * from './step-metadata.ts';
export * from './tp.ts';
export { MoRIIOWorker } from './worker.ts';
