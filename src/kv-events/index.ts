export { KVCacheState } from './cache-state.ts';
export { END_SEQ, offsetEndpointPort, SNAPSHOT_REQUEST, seqBytes, shouldBind } from './endpoint.ts';
export {
  createEventPublisher,
  type EventPublisher,
  heartbeatSecondsFromEnv,
  kvEventsLayoutFromEnv,
  NullEventPublisher,
  ZmqEventPublisher,
} from './publisher.ts';
export {
  KVEventSubscriber,
  type KVEventSubscriberOptions,
  type KVEventSubscriberStats,
} from './subscriber.ts';
export * from './wire.ts';
