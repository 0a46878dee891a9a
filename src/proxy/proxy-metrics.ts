/** The proxy's Prometheus metrics (GET /metrics), on a private registry. */
import { Counter, Registry } from 'prom-client';

export type FallbackReason = 'no_prefill' | 'connect' | 'status' | 'timeout' | 'bad_response';
/** Why a leg was retried: FallbackReason's causes, a failed KV load, or a body cut mid-way. */
export type RetryReason = 'connect' | 'status' | 'timeout' | 'bad_response' | 'kv_load' | 'interrupted';

export class ProxyMetrics {
  readonly registry = new Registry();
  readonly fallbacks = new Counter({
    name: 'kvconnect:proxy_prefill_fallbacks_total',
    help: 'Requests served by a decode instance alone (local prefill) because no prefill instance was healthy or the prefill leg failed.',
    labelNames: ['reason'],
    registers: [this.registry],
  });
  readonly retries = new Counter({
    name: 'kvconnect:proxy_retries_total',
    help: 'Legs sent again to another instance after a failure that reached no client byte (leg="prefill"|"decode"), and streams continued on another decode instance (leg="resume").',
    labelNames: ['leg', 'reason'],
    registers: [this.registry],
  });
  readonly requests = new Counter({
    name: 'kvconnect:proxy_requests_total',
    help: 'Completion requests by how they were served: disaggregated (P then D) or by a decode instance alone.',
    labelNames: ['flow'],
    registers: [this.registry],
  });
  readonly kvAwareRoutes = new Counter({
    name: 'kvconnect:proxy_kv_aware_routes_total',
    help: 'kv_aware routing decisions, by whether some candidate held a cached prefix of the prompt.',
    labelNames: ['matched'],
    registers: [this.registry],
  });
  readonly kvAwareMatchedTokens = new Counter({
    name: 'kvconnect:proxy_kv_aware_matched_tokens_total',
    help: 'Prompt tokens the chosen instance held in its prefix cache when kv_aware routed to it (per the KV events).',
    registers: [this.registry],
  });

  readonly kvAwareLoadOverrides = new Counter({
    name: 'kvconnect:proxy_kv_aware_load_overrides_total',
    help: 'kv_aware routing decisions that went to an instance with a shorter cached prefix than another candidate, because the cost (queued prefill, running requests) was lower there.',
    registers: [this.registry],
  });

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
