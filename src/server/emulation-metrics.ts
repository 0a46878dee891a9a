/**
 * What an emulating server states in /metrics (docs/emulation.md): the emulated deployment
 * as an info series, and the two numbers a dashboard needs to read its byte metrics and
 * transfer times — the divisor applied to the target's KV bytes and the emulated link.
 * Registered only when the server emulates (and each number only when it is configured).
 */
import { Gauge, type Registry } from 'prom-client';
import { pythonStr } from '../config/config-error.ts';
import type { EmulationConfig } from '../config/emulation-config.ts';
import type { ConnectorMetricSpec } from '../connector/metric-specs.ts';

/** Where a NixlConnector's link counts are in the step stats: its own, or as a MultiConnector child. */
const LINK_STATS_AT = [['kv_link'], ['NixlConnector', 'kv_link']];

const linkCounter = (name: string, key: string, help: string): ConnectorMetricSpec[] =>
  LINK_STATS_AT.map((within) => ({
    name: `kvconnect:kv_link_${name}_total`,
    help: `kvconnect: ${help}`,
    type: 'counter',
    key,
    within,
  }));

/**
 * The emulated link's counts (--kv-link), fed by the connector's stats (`kv_link` in a
 * NixlConnector's step stats): registered when a link is set, from 0.
 */
export function emulatedLinkMetricSpecs(emulation: EmulationConfig | null): ConnectorMetricSpec[] {
  if (!emulation?.kvLink) return [];
  return [
    linkCounter('transfers', 'transfers', 'KV transfers posted over the emulated link (--kv-link).'),
    linkCounter('bytes', 'bytes', 'bytes of the KV transfers posted over the emulated link.'),
    linkCounter(
      'modelled_seconds',
      'link_seconds',
      'modelled time of the emulated link for those transfers (setup latency + bytes / bandwidth).',
    ),
    linkCounter(
      'held_transfers',
      'held_transfers',
      'transfers that finished for real before the emulated link would have, and were held until it would.',
    ),
    linkCounter(
      'held_seconds',
      'held_seconds',
      'time completions were held past the real transfer, in emulated seconds.',
    ),
  ].flat();
}

export function registerEmulationMetrics(
  registry: Registry,
  labels: Record<string, string>,
  emulation: EmulationConfig | null,
): void {
  if (!emulation) return;
  const registers = [registry];
  const labelNames = Object.keys(labels);
  const info = {
    ...labels,
    latency_calculator: pythonStr(emulation.latencyCalculator),
    mode: emulation.mode,
    speedup: pythonStr(emulation.speedup),
    target_model: pythonStr(emulation.targetKv?.model ?? emulation.roofline?.model ?? null),
    target_accelerator: pythonStr(emulation.roofline?.accelerator ?? null),
    target_tp: pythonStr(emulation.roofline?.tensorParallelSize ?? null),
    kv_bytes_scale: pythonStr(emulation.targetKv?.bytesScale ?? null),
    kv_link: pythonStr(emulation.kvLink?.name ?? null),
  };
  new Gauge({
    name: 'kvconnect:emulation_info',
    help: 'kvconnect: 1, labelled with the emulated deployment (latency calculator, token mode, speedup, target, KV byte scale, link).',
    labelNames: Object.keys(info),
    registers,
  }).set(info, 1);
  if (emulation.targetKv) {
    new Gauge({
      name: 'kvconnect:kv_bytes_scale',
      help: "kvconnect: the target model's KV bytes are divided by this (--kv-bytes-scale); byte metrics count the divided bytes.",
      labelNames,
      registers,
    }).set(labels, emulation.targetKv.bytesScale);
  }
  if (emulation.kvLink) {
    new Gauge({
      name: 'kvconnect:kv_link_bandwidth_bytes_per_second',
      help: 'kvconnect: bandwidth of the emulated KV link (--kv-link) a transfer is held to.',
      labelNames,
      registers,
    }).set(labels, emulation.kvLink.bandwidthGBs * 1e9);
    new Gauge({
      name: 'kvconnect:kv_link_setup_latency_seconds',
      help: 'kvconnect: setup latency of the emulated KV link (--kv-link) added to every transfer.',
      labelNames,
      registers,
    }).set(labels, emulation.kvLink.latencyUs / 1e6);
  }
}
