/**
 * `kvconnect check-config`: everything a server would check about its connector
 * configuration at startup, without starting anything.
 */
import type { DottedArg } from '../config/dotted-args.ts';
import { buildEngineConfig } from '../config/engine-config.ts';
import { extraConfigWarnings } from '../config/extra-config.ts';
import { KVTransferConfig } from '../config/kv-transfer-config.ts';
import { type ModelInfo, resolveModelInfo } from '../config/model-info.ts';
import { MULTI_CONNECTOR_NAME, multiConnectorChildren } from '../config/multi-connector-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../config/types.ts';
import { KVConnectorFactory } from '../connector/factory.ts';
import { resolveHybridKvCacheManager } from '../connector/hma.ts';
import { KVError } from '../errors/kv-error.ts';
import { onLog } from '../logging/logger.ts';

export interface CheckConfigInput {
  kvTransferConfigJson?: string | undefined;
  dotted?: readonly DottedArg[];
  /** Engine options by snake_case name (strings as typed on the command line are fine). */
  engineOptions?: Record<string, unknown>;
}

export interface ConnectorReport {
  connector: string;
  className: string;
  /** 'external': loaded from kv_connector_module_path. */
  status: 'available' | 'external';
  moduleSource: string;
  supportsHMA: boolean;
  extraConfig: unknown;
  children?: ConnectorReport[];
}

export interface CheckConfigReport {
  valid: true;
  connector: ConnectorReport;
  role: string;
  engineId: string;
  model: {
    name: string;
    source: string;
    hybrid: boolean;
    fullAttentionLayers: number;
    slidingWindowLayers: number;
  };
  hma: { enabled: boolean; reason: string; explanation: string; kvCacheLayout: string };
  kvTransferConfig: Record<string, unknown>;
  warnings: string[];
}

async function inspectConnector(
  config: KVTransferConfigLike,
  engineConfig: EngineConfig,
  warnings: string[],
): Promise<ConnectorReport> {
  const name = config.kv_connector!;
  const cls = await KVConnectorFactory.getConnectorClass(config);
  if (cls.extraConfigSchema)
    warnings.push(...extraConfigWarnings(cls.extraConfigSchema, config.kv_connector_extra_config));
  const extraConfig =
    typeof cls.validateExtraConfig === 'function'
      ? cls.validateExtraConfig(config.kv_connector_extra_config, {
          ...engineConfig,
          kvTransferConfig: config,
        })
      : config.kv_connector_extra_config;
  const report: ConnectorReport = {
    connector: name,
    className: cls.name,
    status: config.kv_connector_module_path ? 'external' : 'available',
    moduleSource: config.kv_connector_module_path ?? 'built-in',
    supportsHMA: cls.supportsHMA === true,
    extraConfig,
  };
  if (name === MULTI_CONNECTOR_NAME && !config.kv_connector_module_path) {
    const children = multiConnectorChildren(config);
    report.children = [];
    for (const child of children) report.children.push(await inspectConnector(child, engineConfig, warnings));
    report.supportsHMA = await KVConnectorFactory.supportsHMAConfig(config);
  }
  return report;
}

/**
 * The model and connector checks a server makes at startup (connector name or module,
 * extra config, the HMA rule), for an engine config with a KV transfer config; warnings are
 * appended to `warnings`.
 */
export async function checkConnectorConfig(
  engineConfig: EngineConfig,
  warnings: string[] = [],
): Promise<{
  model: ModelInfo;
  connector: ConnectorReport;
  hma: Awaited<ReturnType<typeof resolveHybridKvCacheManager>>;
}> {
  const config = engineConfig.kvTransferConfig;
  if (config === null) throw new Error('checkConnectorConfig needs an engine config with a kvTransferConfig');
  const model = resolveModelInfo(engineConfig.model.model);
  if (config.kv_connector === null) await KVConnectorFactory.getConnectorClass(config);
  const connector = await inspectConnector(config, engineConfig, warnings);
  const hma = await resolveHybridKvCacheManager(engineConfig);
  await KVConnectorFactory.checkHMA(engineConfig, connector.className);
  return { model, connector, hma };
}

export async function runCheckConfig(input: CheckConfigInput): Promise<CheckConfigReport> {
  const warnings: string[] = [];
  const off = onLog((r) => {
    if (r.level === 'warn' || r.level === 'error') warnings.push(r.message);
  });
  try {
    const kvTransferConfig = KVTransferConfig.fromCli(input.kvTransferConfigJson, input.dotted ?? []);
    const engineConfig = buildEngineConfig({
      ...(input.engineOptions ?? {}),
      kv_transfer_config: kvTransferConfig,
    });
    if (engineConfig.kvTransferConfig === null) {
      throw new KVError(
        'KV_TRANSFER_CONFIG_MISSING',
        'kv_transfer_config must be set to create a connector',
        {
          field: 'kv_transfer_config',
          hint: `Pass --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' (or the dotted form --kv-transfer-config.kv_connector NixlConnector --kv-transfer-config.kv_role kv_producer).`,
        },
      );
    }
    const config = engineConfig.kvTransferConfig;
    const { model, connector, hma } = await checkConnectorConfig(engineConfig, warnings);
    return {
      valid: true,
      connector,
      role: config.kv_role!,
      engineId: config.engine_id,
      model: {
        name: model.name,
        source: model.source,
        hybrid: model.isHybrid,
        fullAttentionLayers: model.numFullAttentionLayers,
        slidingWindowLayers: model.numSlidingWindowLayers,
      },
      hma: {
        enabled: hma.enabled,
        reason: hma.reason,
        explanation: hma.explanation,
        kvCacheLayout: layout(model, hma.enabled),
      },
      kvTransferConfig: (config as KVTransferConfig).toJSON() as unknown as Record<string, unknown>,
      warnings: [...new Set(warnings)],
    };
  } finally {
    off();
  }
}

function layout(model: ModelInfo, hmaEnabled: boolean): string {
  if (!model.isHybrid) return 'one KV cache group (all layers use full attention)';
  return hmaEnabled
    ? 'separate KV cache groups for full-attention and sliding-window layers'
    : 'one KV cache group: sliding-window layers are allocated as full attention (more KV memory per request)';
}

export function formatCheckConfigReport(r: CheckConfigReport): string {
  const c = r.connector;
  const lines = [
    'kv_transfer_config is valid',
    `  connector:    ${c.connector}${c.className !== c.connector ? ` (class ${c.className})` : ''} [${c.status}${c.status === 'external' ? `: ${c.moduleSource}` : ''}]`,
    `  role:         ${r.role}`,
    `  engine id:    ${r.engineId}`,
    `  model:        ${r.model.name} (${r.model.hybrid ? `hybrid: ${r.model.fullAttentionLayers} full-attention + ${r.model.slidingWindowLayers} sliding-window layers` : `${r.model.fullAttentionLayers} full-attention layers`})`,
    `  HMA:          ${r.hma.enabled ? 'on' : 'off'} (${r.hma.explanation})`,
    `  KV cache:     ${r.hma.kvCacheLayout}`,
    `  extra config: ${JSON.stringify(c.extraConfig)}`,
  ];
  for (const [i, child] of (c.children ?? []).entries()) {
    lines.push(
      `  child ${i}:      ${child.connector} [${child.status}] HMA ${child.supportsHMA ? 'supported' : 'unsupported'}, extra config ${JSON.stringify(child.extraConfig)}`,
    );
  }
  for (const w of r.warnings) lines.push(`  warning: ${w}`);
  return `${lines.join('\n')}\n`;
}
