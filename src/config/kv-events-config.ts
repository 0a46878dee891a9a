/**
 * vLLM's KVEventsConfig (`--kv-events-config`, vllm/config/kv_events.py): the same
 * snake_case fields, defaults and the derived publisher ("zmq" when events are enabled,
 * else "null"). Unknown keys are rejected, as vLLM's config classes forbid extras.
 */
import { isIP } from 'node:net';
import { KVError } from '../errors/kv-error.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { configError, describeValue, didYouMean } from './config-error.ts';
import { type DottedArg, deepMerge, dottedArgsToObject } from './dotted-args.ts';
import { parseConfigJson } from './kv-transfer-config.ts';

const log = getLogger('kvconnect.config.kv-events-config');

export type KVEventsPublisherKind = 'null' | 'zmq';
export const KV_EVENTS_PUBLISHERS: readonly KVEventsPublisherKind[] = ['null', 'zmq'];

export interface KVEventsConfigFields {
  enable_kv_cache_events: boolean;
  publisher: KVEventsPublisherKind;
  endpoint: string;
  replay_endpoint: string | null;
  buffer_steps: number;
  hwm: number;
  max_queue_size: number;
  topic: string;
}

type Parser = (value: unknown, field: string) => unknown;

const bool: Parser = (v, f) => {
  if (typeof v === 'boolean') return v;
  throw configError(f, 'true or false', v, `Set ${f} to the JSON literal true or false (without quotes).`);
};
const str: Parser = (v, f) => {
  if (typeof v === 'string') return v;
  throw configError(f, 'a string', v, `Set ${f} to a JSON string.`);
};
const endpoint: Parser = (v, f) => {
  const s = str(v, f) as string;
  if (/^(tcp|ipc|inproc):\/\/./.test(s)) return s;
  throw configError(
    f,
    'a ZeroMQ endpoint such as "tcp://*:5557", "tcp://127.0.0.1:5557", "ipc:///tmp/kv" or "inproc://kv"',
    v,
    `Set ${f} to tcp://HOST:PORT ("*" binds every interface), ipc://PATH or inproc://NAME.`,
  );
};
const count: Parser = (v, f) => {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
  throw configError(
    f,
    'a non-negative integer',
    v,
    `Set ${f} to a whole number, e.g. ${DEFAULTS[f.replace('kv_events_config.', '') as Key]}.`,
  );
};
const publisher: Parser = (v, f) => {
  if (v === null) return null;
  if (typeof v === 'string' && (KV_EVENTS_PUBLISHERS as readonly string[]).includes(v)) return v;
  throw configError(
    f,
    'one of "null", "zmq"',
    v,
    `${typeof v === 'string' ? `${didYouMean(v, KV_EVENTS_PUBLISHERS)} ` : ''}Use "zmq" to publish over ZeroMQ or "null" to drop events.`.trimStart(),
  );
};

type Key = keyof KVEventsConfigFields;

const DEFAULTS: { [K in Key]: KVEventsConfigFields[K] | null } = {
  enable_kv_cache_events: false,
  publisher: null,
  endpoint: 'tcp://*:5557',
  replay_endpoint: null,
  buffer_steps: 10_000,
  hwm: 100_000,
  max_queue_size: 100_000,
  topic: '',
};

const PARSERS: { [K in Key]: Parser } = {
  enable_kv_cache_events: bool,
  publisher,
  endpoint,
  replay_endpoint: (v, f) => (v === null ? null : endpoint(v, f)),
  buffer_steps: count,
  hwm: count,
  max_queue_size: count,
  topic: str,
};

/** Field names in vLLM's declaration order. */
export const KV_EVENTS_CONFIG_FIELDS = Object.keys(DEFAULTS) as Key[];

/** Validates a KVEventsConfig object (defaults applied, publisher derived as vLLM does). */
export function parseKVEventsConfig(input: unknown): KVEventsConfigFields {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw configError(
      'kv_events_config',
      'a JSON object',
      input,
      `Pass an object such as {"enable_kv_cache_events": true, "endpoint": "tcp://*:5557"}.`,
    );
  }
  const obj = input as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if (!Object.hasOwn(DEFAULTS, key)) {
      const suggestion = didYouMean(key, KV_EVENTS_CONFIG_FIELDS);
      throw new KVError('KV_CONFIG_UNKNOWN_KEY', `Unknown field '${key}' in kv_events_config`, {
        field: `kv_events_config.${key}`,
        hint: `${suggestion ? `${suggestion} ` : ''}The fields are: ${KV_EVENTS_CONFIG_FIELDS.join(', ')}.`,
        details: { expected: KV_EVENTS_CONFIG_FIELDS, received: describeValue(key) },
      });
    }
  }
  const out: Record<string, unknown> = {};
  for (const key of KV_EVENTS_CONFIG_FIELDS) {
    const raw = obj[key];
    out[key] = raw === undefined ? DEFAULTS[key] : PARSERS[key](raw, `kv_events_config.${key}`);
  }
  out['publisher'] ??= out['enable_kv_cache_events'] ? 'zmq' : 'null';
  return out as unknown as KVEventsConfigFields;
}

/** `--kv-events-config '<json>'` and/or its dotted form; null when neither is given. */
export function kvEventsConfigFromCli(
  json: string | null | undefined,
  dotted: readonly DottedArg[] = [],
): KVEventsConfigFields | null {
  if ((json === undefined || json === null) && dotted.length === 0) return null;
  const base = json === undefined || json === null ? {} : parseConfigJson(json, 'kv_events_config');
  if (dotted.length === 0 || typeof base !== 'object' || base === null || Array.isArray(base))
    return parseKVEventsConfig(base);
  return parseKVEventsConfig(
    deepMerge(base as Record<string, unknown>, dottedArgsToObject(dotted, 'kv_events_config')),
  );
}

/** A config object, its JSON text, or nothing. */
export function toKVEventsConfig(value: unknown): KVEventsConfigFields | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return parseKVEventsConfig(parseConfigJson(value, 'kv_events_config'));
  return parseKVEventsConfig(value);
}

/** vLLM's start-up warnings about a config that cannot do what it says. */
export function warnKVEventsConfig(config: KVEventsConfigFields | null, enablePrefixCaching: boolean): void {
  if (!config) return;
  if (config.enable_kv_cache_events && !enablePrefixCaching) {
    log.warn(
      'KV cache events are on, but prefix caching is not enabled. Use --enable-prefix-caching to enable.',
    );
  }
  if (config.publisher !== 'null' && !config.enable_kv_cache_events) {
    log.warn(
      'KV cache events are disabled, but the scheduler is configured to publish them. ' +
        'Modify KVEventsConfig.enable_kv_cache_events to True to enable.',
    );
  }
}

/** True when events are collected and published (vLLM: enable_kv_cache_events and a non-null publisher). */
export function kvEventsPublishing(config: KVEventsConfigFields | null | undefined): boolean {
  return !!config && config.enable_kv_cache_events && config.publisher !== 'null';
}

/**
 * llm-d's KV-events topic, `kv@<pod-ip>:<port>@<model>`: its router subscribes to the `kv@`
 * prefix and reads the pod (as address:port, the way it addresses endpoints) and the model
 * back from the topic. The address is written as given, IPv6 included, as
 * llm-d-inference-sim writes it.
 */
export function podKVEventsTopic(podIp: string, port: number, model: string): string {
  return `kv@${podIp}:${port}@${model}`;
}

/**
 * The config a server at `port` serving `model` publishes with: when events are published,
 * the config leaves `topic` empty and `POD_IP` is set (Kubernetes' downward API), the topic
 * is llm-d's `kv@<POD_IP>:<port>@<model>` (as llm-d-inference-sim derives it). A configured
 * topic always wins. Port 0 (any free port) cannot be named before the server listens, so
 * the topic stays empty, with a warning.
 */
export function withPodTopic(
  config: KVEventsConfigFields | null,
  server: { port: number; model: string },
  env?: Environment,
): KVEventsConfigFields | null {
  if (!config || !kvEventsPublishing(config) || config.topic !== '') return config;
  const podIp = readEnv('POD_IP', env)?.trim();
  if (!podIp) return config;
  if (isIP(podIp) === 0) {
    throw configError(
      'POD_IP',
      'an IPv4 or IPv6 address (the pod address Kubernetes sets from status.podIP)',
      podIp,
      'Set POD_IP from the downward API (valueFrom.fieldRef.fieldPath: status.podIP), unset it, or set kv_events_config.topic yourself.',
    );
  }
  if (server.port === 0) {
    log.warn(
      'POD_IP is set but --port is 0: the KV events topic cannot name the port before the server listens, so it stays empty. Pass --port N or set kv_events_config.topic.',
    );
    return config;
  }
  return { ...config, topic: podKVEventsTopic(podIp, server.port, server.model) };
}
