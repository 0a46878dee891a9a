/**
 * vllm:lora_requests_info as vLLM writes it: a gauge without model_name / engine labels,
 * labelled max_lora, running_lora_adapters and waiting_lora_adapters (comma-separated adapter
 * names), whose value is the time of the row in seconds since the epoch. The Gateway API
 * Inference Extension's LoRA-affinity scorer reads the row with the latest value. The one
 * renderer of the family: fake metrics and the engine's LoRA stats both go through it.
 */
import { Gauge, type Registry } from 'prom-client';

export const LORA_REQUESTS_INFO = 'vllm:lora_requests_info';

export interface LoraRequestsRow {
  /** Adapters of running requests (a list, or vLLM's comma-separated string). */
  running: readonly string[] | string;
  waiting: readonly string[] | string;
  /** Seconds since the epoch (vLLM sets the current time). */
  timestamp: number;
}

export function loraRequestsInfoGauge(registry: Registry): Gauge {
  return new Gauge({
    name: LORA_REQUESTS_INFO,
    help: 'Running stats on lora requests.',
    // vLLM's label order.
    labelNames: ['max_lora', 'waiting_lora_adapters', 'running_lora_adapters'],
    registers: [registry],
  });
}

const joined = (names: readonly string[] | string): string =>
  typeof names === 'string' ? names : names.join(',');

/** Sets one series per row (label values as vLLM writes them: max_lora as str(int)). */
export function setLoraRequestsInfo(gauge: Gauge, maxLora: number, rows: readonly LoraRequestsRow[]): void {
  for (const row of rows) {
    gauge.set(
      {
        max_lora: String(maxLora),
        waiting_lora_adapters: joined(row.waiting),
        running_lora_adapters: joined(row.running),
      },
      row.timestamp,
    );
  }
}
