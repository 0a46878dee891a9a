/**
 * The shared connector conformance suite in p2p mode, for MoRIIO READ over xgmi: the suite
 * runs the producer request first and hands its returned kv_transfer_params to the consumer,
 * which is READ's flow. Its request ids carry no proxy embedding, so the consumer addresses
 * the producer with the explicit remote_host / remote_handshake_port / remote_notify_port P
 * returned. WRITE needs both legs in flight at once, which this suite's shape does not do;
 * moriio-e2e covers it. No corruption hooks: MoRIIO has no stored blocks to damage.
 */
import { randomUUID } from 'node:crypto';
import type { KVTransferParams } from '../../../src/connector/types.ts';
import type { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { samplingParams } from '../../../src/engine/llm.ts';
import { type ConformanceContext, runConnectorConformance } from '../helpers/conformance.ts';
import { moriioPorts } from './helpers.ts';

function config(ctx: ConformanceContext, role: 'kv_producer' | 'kv_consumer'): Record<string, unknown> {
  const ports = ctx.state[role] as { handshakePort: number; notifyPort: number };
  return {
    kv_connector: 'MoRIIOConnector',
    kv_role: role,
    kv_connector_extra_config: {
      http_port: 8000,
      host_ip: '127.0.0.1',
      handshake_port: ports.handshakePort,
      notify_port: ports.notifyPort,
      backend: 'xgmi',
      read_mode: true,
      transfer_timeout: 10,
    },
  };
}

async function produce(
  _ctx: ConformanceContext,
  producer: AsyncEngine,
  request: { requestId: string; promptTokenIds: number[] },
): Promise<KVTransferParams | null> {
  let params: KVTransferParams | null = null;
  for await (const delta of producer.generate({
    requestId: request.requestId,
    promptTokenIds: request.promptTokenIds,
    sampling: samplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true }),
    kvTransferParams: { do_remote_decode: true, transfer_id: `tx-${randomUUID()}`, remote_tp_size: 1 },
  })) {
    if (delta.kvTransferParams) params = delta.kvTransferParams;
  }
  return params;
}

runConnectorConformance({
  name: 'MoRIIOConnector (READ, xgmi)',
  mode: 'p2p',
  supportsHybrid: false,
  setup: async (ctx) => {
    ctx.state['kv_producer'] = await moriioPorts();
    ctx.state['kv_consumer'] = await moriioPorts();
  },
  makeProducerConfig: (ctx) => config(ctx, 'kv_producer'),
  makeConsumerConfig: (ctx) => config(ctx, 'kv_consumer'),
  produce,
});
