/**
 * `kvconnect serve`: the OpenAI-compatible server, with `vllm serve`'s flag names. Engine
 * flags come from the engine option table (src/config/engine-options.ts) via
 * addEngineOptions, so help, defaults and validation cannot drift. Any bad flag or config
 * is reported (message + hint) with exit code 2 before anything listens.
 */
import type { Command } from 'commander';
import { buildEmulationConfig } from '../../config/emulation-config.ts';
import { buildEngineConfig } from '../../config/engine-config.ts';
import { kvEventsConfigFromCli, withPodTopic } from '../../config/kv-events-config.ts';
import { KVTransferConfig } from '../../config/kv-transfer-config.ts';
import { parseLoraModules } from '../../config/lora-modules.ts';
import { loadSimConfigFile, mergeSimConfig } from '../../config/sim-config-file.ts';
import { buildSteering, type SteeringConfig } from '../../config/steering-options.ts';
import type { EngineConfig } from '../../config/types.ts';
import type { AsyncEngineLike } from '../../engine/api.ts';
import { formatErrorText, KVError } from '../../errors/index.ts';
import { parseShowHiddenMetricsForVersion } from '../../server/hidden-metrics.ts';
import type { LoraServingOptions } from '../../server/served-models.ts';
import { type CliContext, EXIT_OK, EXIT_USAGE } from '../context.ts';
import { localRankConfigs, rankPort } from '../data-parallel.ts';
import {
  addEmulationOptions,
  emulationOptionsFromCommander,
  steeringOptionsFromCommander,
} from '../emulation-flags.ts';
import { addEngineOptions, engineOptionsFromCommander } from '../engine-flags.ts';

/** Same value as src/server DEFAULT_MAX_QUEUE (kept here so --help does not load the server). */
const DEFAULT_MAX_QUEUE = 1024;

export type EngineFactory = (config: EngineConfig) => Promise<AsyncEngineLike>;

export interface ServeDeps {
  createEngine?: EngineFactory;
  /** Resolves when the server should stop; default: the first SIGINT or SIGTERM. */
  stopSignal?: () => Promise<void>;
}

interface ServeFlags {
  host: string;
  port: string;
  kvTransferConfig?: string;
  kvEventsConfig?: string;
  apiKey?: string;
  maxQueue: string;
  config?: string;
  enablePromptTokensDetails?: boolean;
  showHiddenMetricsForVersion?: string;
  trustRequestChatTemplate?: boolean;
  enableSleepMode?: boolean;
  enableTokenizerInfoEndpoint?: boolean;
  responseRole: string;
  dryRun?: boolean;
  loraModules?: string[];
  loraAllowedDirs?: string[];
  [key: string]: unknown;
}

async function defaultCreateEngine(config: EngineConfig): Promise<AsyncEngineLike> {
  const { AsyncEngine } = await import('../../engine/async-engine.ts');
  return AsyncEngine.create(config);
}

function waitForShutdownSignal(): Promise<void> {
  return new Promise((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

function parseIntFlag(name: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new KVError(
      'KV_CONFIG_INVALID',
      `Invalid value for ${name}: expected an integer in ${min}..${max}, received ${JSON.stringify(raw)}`,
      {
        field: name,
        hint: `Pass --${name.replaceAll('_', '-')} with a whole number between ${min} and ${max}.`,
      },
    );
  }
  return n;
}

/**
 * `serve --dry-run`: the checks a start makes before the engine loads (the model resolves, the
 * connector and its extra config are valid for it), then one line per rank of what would run.
 */
async function dryRun(ctx: CliContext, host: string, port: number, ranks: EngineConfig[]): Promise<void> {
  const first = ranks[0]!;
  if (first.kvTransferConfig) {
    const { checkConnectorConfig } = await import('../check-config-run.ts');
    await checkConnectorConfig(first);
  } else {
    const { resolveModelInfo } = await import('../../config/model-info.ts');
    resolveModelInfo(first.model.model);
  }
  const transfer = first.kvTransferConfig;
  const { offsetEndpointPort } = await import('../../kv-events/endpoint.ts');
  for (const [r, rank] of ranks.entries()) {
    const events = rank.kvEventsConfig;
    const parts = [
      `model ${rank.model.servedModelName}`,
      `on ${host}:${rankPort(port, r)}`,
      transfer ? `connector ${transfer.kv_connector} (${transfer.kv_role})` : 'no KV connector',
      events?.enable_kv_cache_events
        ? `KV events ${offsetEndpointPort(events.endpoint, rank.parallel.dataParallelRank, 'kv_events_config.endpoint')}${events.topic ? ` topic ${events.topic}` : ''}`
        : 'no KV events',
    ];
    ctx.io.out(`kvconnect serve --dry-run: valid; would serve ${parts.join(', ')}\n`);
  }
  ctx.exitCode = EXIT_OK;
}

/** --lora-modules / --lora-allowed-dirs, checked against --enable-lora. */
function loraServingFromFlags(
  flags: ServeFlags,
  config: EngineConfig,
  fileModules: readonly string[] | undefined,
): LoraServingOptions | null {
  const modules = parseLoraModules(flags.loraModules ?? fileModules ?? []);
  const allowedDirs = flags.loraAllowedDirs ?? [];
  if (!config.lora && (modules.length > 0 || allowedDirs.length > 0)) {
    throw new KVError('LORA_CONFIG_INVALID', '--lora-modules and --lora-allowed-dirs need --enable-lora', {
      field: 'enable_lora',
      hint: 'Add --enable-lora (and --max-lora-rank if an adapter has a rank above 16).',
    });
  }
  return config.lora ? { modules, allowedDirs } : null;
}

export function registerServeCommand(program: Command, ctx: CliContext, deps: ServeDeps = {}): Command {
  const command = program
    .command('serve')
    .description(
      'Start an OpenAI-compatible server (POST /v1/completions, /v1/chat/completions, GET /metrics, ...)',
    )
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <n>', 'port to listen on (0 = any free port)', '8000')
    .option(
      '--kv-transfer-config <json>',
      'KV transfer config as JSON, or use the dotted form --kv-transfer-config.kv_role kv_producer (default: none)',
    )
    .option(
      '--kv-events-config <json>',
      'KV cache events (vLLM\'s KVEventsConfig) as JSON, e.g. \'{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557"}\', or the dotted form --kv-events-config.enable_kv_cache_events true; without a topic, env POD_IP gives llm-d\'s kv@<POD_IP>:<port>@<model> (default: none)',
    )
    .option('--api-key <key>', 'require "Authorization: Bearer <key>" on /v1/* (default: none)')
    .option(
      '--enable-prompt-tokens-details',
      "add usage.prompt_tokens_details.cached_tokens (prompt tokens not computed) to every response, as vLLM's flag does",
    )
    .option(
      '--show-hidden-metrics-for-version <version>',
      "serve the metrics vLLM hid after deprecating them, when <version> is the minor release before the one kvconnect follows (as vLLM's flag; its current release hides none)",
    )
    .option(
      '--trust-request-chat-template',
      'render a chat_template sent with a chat request (or in its chat_template_kwargs); without it such requests are refused with 400, as vLLM does',
    )
    .option(
      '--enable-tokenizer-info-endpoint',
      "serve GET /tokenizer_info (the tokenizer's configuration, including its chat template), as vLLM's flag does",
    )
    .option(
      '--enable-sleep-mode',
      "let POST /sleep and /wake_up (development endpoints: VLLM_SERVER_DEV_MODE=1) pause the engine and discard its KV cache, as vLLM's sleep mode",
    )
    .option(
      '--response-role <role>',
      "the role of the answer's message when the request adds a generation prompt",
      'assistant',
    )
    .option(
      '--lora-modules <spec...>',
      'LoRA adapters to serve (with --enable-lora): name=path, or JSON \'{"name": ..., "path": ..., "base_model_name": ...}\'; a request names one as its model',
    )
    .option(
      '--lora-allowed-dirs <dir...>',
      'directories below which POST /v1/load_lora_adapter may read adapters (VLLM_ALLOW_RUNTIME_LORA_UPDATING=1); none: runtime loading is refused',
    )
    .option(
      '--max-queue <n>',
      'requests accepted beyond --max-num-seqs before answering 503',
      String(DEFAULT_MAX_QUEUE),
    )
    .option(
      '--dry-run',
      'check the flags and configs as a start would (model, connector, KV events), print what would run, and exit 0 (2 when invalid) without loading the model or opening a port',
    );
  addEngineOptions(command);
  addEmulationOptions(command);
  command.action(async (flags: ServeFlags) => {
    let config: EngineConfig;
    let port: number;
    let maxQueue: number;
    let externalRank: boolean;
    let steering: SteeringConfig;
    let lora: LoraServingOptions | null = null;
    let showHiddenMetricsForVersion: string | null;
    try {
      showHiddenMetricsForVersion = parseShowHiddenMetricsForVersion(flags.showHiddenMetricsForVersion);
      // llm-d-inference-sim's YAML, under the flags the user passed (defaults do not count).
      const file = flags.config ? loadSimConfigFile(flags.config) : null;
      const passed = (name: string): boolean => command.getOptionValueSource(name) === 'cli';
      port =
        passed('port') || file?.port === undefined ? parseIntFlag('port', flags.port, 0, 65535) : file.port;
      maxQueue =
        passed('maxQueue') || file?.maxQueue === undefined
          ? parseIntFlag('max_queue', flags.maxQueue, 0, 1_000_000)
          : file.maxQueue;
      const options = mergeSimConfig(file, {
        engine: engineOptionsFromCommander(flags),
        emulation: emulationOptionsFromCommander(flags),
        steering: steeringOptionsFromCommander(flags),
      });
      const kvTransferConfig = KVTransferConfig.fromCli(flags.kvTransferConfig, ctx.dottedKvTransferConfig);
      config = buildEngineConfig({
        ...options.engine,
        kv_transfer_config: kvTransferConfig,
        kv_events_config: kvEventsConfigFromCli(flags.kvEventsConfig, ctx.dottedKvEventsConfig),
      });
      config.emulation = buildEmulationConfig(options.emulation, config.model.seed);
      steering = buildSteering(options.steering);
      config.kvLoadFaults = steering.kvLoadFaults;
      lora = loraServingFromFlags(flags, config, passed('loraModules') ? undefined : file?.loraModules);
      // --data-parallel-rank makes this process one rank of an external group.
      externalRank = options.engine.data_parallel_rank !== undefined;
    } catch (e) {
      ctx.io.err(`${formatErrorText(e)}\n`);
      ctx.exitCode = EXIT_USAGE;
      return;
    }
    let ranks: EngineConfig[];
    try {
      // Each rank publishes KV events under its own llm-d topic when POD_IP is set.
      ranks = localRankConfigs(config, externalRank).map((rankConfig, r) => ({
        ...rankConfig,
        kvEventsConfig: withPodTopic(rankConfig.kvEventsConfig ?? null, {
          port: rankPort(port, r),
          model: rankConfig.model.servedModelName,
        }),
      }));
      if (flags.dryRun) {
        await dryRun(ctx, flags.host, port, ranks);
        return;
      }
    } catch (e) {
      ctx.io.err(`${formatErrorText(e)}\n`);
      ctx.exitCode = EXIT_USAGE;
      return;
    }
    const engines: AsyncEngineLike[] = [];
    try {
      for (const rankConfig of ranks)
        engines.push(await (deps.createEngine ?? defaultCreateEngine)(rankConfig));
    } catch (e) {
      ctx.io.err(`${formatErrorText(e)}\n`);
      for (const engine of engines) await engine.shutdown();
      ctx.exitCode = EXIT_USAGE;
      return;
    }
    const { createServer } = await import('../../server/server.ts');
    const servers: Array<{ close(): Promise<void> }> = [];
    const stopAll = async (): Promise<void> => {
      for (const server of servers) await server.close();
      for (const engine of engines) await engine.shutdown();
    };
    for (const [r, engine] of engines.entries()) {
      const server = createServer({
        engine,
        apiKey: flags.apiKey ?? null,
        maxQueue,
        enablePromptTokensDetails: flags.enablePromptTokensDetails === true,
        showHiddenMetricsForVersion,
        failureInjection: steering.failures,
        fakeMetrics: steering.fakeMetrics,
        fakeMetricsRefreshMs: steering.fakeMetricsRefreshMs,
        startupDurationNs: steering.startupDurationNs,
        trustRequestChatTemplate: flags.trustRequestChatTemplate === true,
        enableSleepMode: flags.enableSleepMode === true,
        enableTokenizerInfoEndpoint: flags.enableTokenizerInfoEndpoint === true,
        responseRole: flags.responseRole,
        dataParallelEngines: engines,
        lora,
      });
      const rankPortNumber = rankPort(port, r);
      try {
        // vLLM's init_static_loras: an adapter that does not load stops serve before it listens.
        await server.loadStaticLoras();
      } catch (e) {
        ctx.io.err(`${formatErrorText(e)}\n`);
        await server.close();
        await stopAll();
        ctx.exitCode = EXIT_USAGE;
        return;
      }
      try {
        const address = await server.start(flags.host, rankPortNumber);
        servers.push(server);
        const rank = engines.length > 1 ? ` (data-parallel rank ${ranks[r]?.parallel.dataParallelRank})` : '';
        ctx.io.out(
          `kvconnect serve: model ${config.model.servedModelName}${rank} listening on ${address.url}\n`,
        );
        const events = engine.kvEventsInfo?.();
        if (events) {
          ctx.io.out(
            `kvconnect serve: KV events on ${events.endpoint}${events.topic ? ` topic ${events.topic}` : ''}${events.replay_endpoint ? ` (replay ${events.replay_endpoint})` : ''}\n`,
          );
        }
      } catch (e) {
        const failure = new KVError(
          'SERVER_LISTEN_FAILED',
          `Cannot listen on ${flags.host}:${rankPortNumber}: ${(e as Error).message}`,
          {
            hint: 'Pick another --port (0 = any free port) or --host, or stop the process that holds the address.',
            cause: e,
          },
        );
        ctx.io.err(`${formatErrorText(failure)}\n`);
        await stopAll();
        ctx.exitCode = EXIT_USAGE;
        return;
      }
    }
    await (deps.stopSignal ?? waitForShutdownSignal)();
    ctx.io.err('kvconnect serve: shutting down\n');
    await stopAll();
    ctx.exitCode = EXIT_OK;
  });
  return command;
}
