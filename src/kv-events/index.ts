export { END_SEQ, offsetEndpointPort, seqBytes, shouldBind } from './endpoint.ts';
export {
  createEventPublisher,
  type EventPublisher,
  kvEventsLayoutFromEnv,
  NullEventPublisher,
  ZmqEventPublisher,
} from './publisher.ts';
export { KVEventSubscriber, type KVEventSubscriberOptions } from './subscriber.ts';
export * from './wire.ts';
