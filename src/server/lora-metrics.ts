/**
 * vllm:lora_requests_info as vLLM's Prometheus logger writes it: a gauge whose labels are
 * max_lora, waiting_lora_adapters and running_lora_adapters (adapter names joined by ","),
 * set to the current time (seconds) on every engine iteration. Each label combination seen
 * keeps its row with the time it was last current, so a reader (the Gateway API inference
 * extension's LoRA-affinity scorer) takes the row with the largest value.
 */
import { Gauge, type Registry } from 'prom-client';
import type { IterationStats } from '../engine/iteration-stats.ts';

export const LORA_INFO_METRIC = 'vllm:lora_requests_info';

export class LoraInfoMetric {
  readonly #gauge: Gauge;
  readonly #maxLora: string;

  constructor(registry: Registry, maxLoras: number) {
    this.#maxLora = String(maxLoras);
    this.#gauge = new Gauge({
      name: LORA_INFO_METRIC,
      help: 'Running stats on lora requests.',
      labelNames: ['max_lora', 'waiting_lora_adapters', 'running_lora_adapters'],
      registers: [registry],
    });
  }

  record(stats: IterationStats): void {
    if (stats.loraAdapters) this.set(stats.loraAdapters.running, stats.loraAdapters.waiting);
  }

  set(running: readonly string[], waiting: readonly string[], nowMs = Date.now()): void {
    this.#gauge.set(
      {
        max_lora: this.#maxLora,
        waiting_lora_adapters: waiting.join(','),
        running_lora_adapters: running.join(','),
      },
      nowMs / 1000,
    );
  }
}
