/**
 * KVConnectorFactory (docs/connector-api.md#factory-and-registry): a lazy name → loader
 * registry, module-path loading of external connectors, the HMA capability check and
 * connector construction, with vLLM's exact messages. Beyond vLLM, unknown names get a "did
 * you mean" hint.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { closestNames } from '../config/config-error.ts';
import { MULTI_CONNECTOR_NAME, multiConnectorChildren } from '../config/multi-connector-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../config/types.ts';
import { KVError } from '../errors/kv-error.ts';
import type { KVCacheConfig } from '../kv/interfaces.ts';
import { getLogger } from '../logging/logger.ts';
import type { KVConnectorBase, KVConnectorClass } from './base.ts';
import { installConnectorClassResolver } from './class-resolver.ts';
import {
  BUILTIN_CONNECTORS,
  type ConnectorModule,
  type ConnectorModuleLoader,
  getBuiltinConnector,
  notImplementedLoader,
} from './registry.ts';
import type { KVConnectorRole } from './types.ts';

const log = getLogger('kvconnect.connector.factory');

type ClassLoader = () => Promise<KVConnectorClass>;

function isFilePath(spec: string): boolean {
  return (
    spec.startsWith('.') || path.isAbsolute(spec) || /\.(m|c)?[jt]s$/.test(spec) || spec.startsWith('file:')
  );
}

/**
 * Resolves a module specifier from the user's working directory: a file path, or an
 * installed package (resolved as `require` would from `cwd/package.json`).
 */
export function resolveModuleSpecifier(spec: string, cwd = process.cwd()): string {
  if (spec.startsWith('file:')) return spec;
  if (isFilePath(spec)) return pathToFileURL(path.resolve(cwd, spec)).href;
  try {
    return pathToFileURL(createRequire(path.join(cwd, 'package.json')).resolve(spec)).href;
  } catch (e) {
    throw moduleNotFound(spec, cwd, e);
  }
}

function moduleNotFound(spec: string, cwd: string, cause: unknown): KVError {
  const looksPython = /^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$/.test(spec);
  return new KVError('KV_CONNECTOR_MODULE_NOT_FOUND', `No module named '${spec}'`, {
    field: 'kv_connector_module_path',
    cause,
    hint: looksPython
      ? `kv_connector_module_path is an ES module file path (e.g. ./connectors/my-connector.mjs) or an npm package name, not a Python dotted path. It is resolved from ${cwd}.`
      : `Check the path (resolved from ${cwd}) or install the package in that directory. External connectors must be compiled .js/.mjs files.`,
  });
}

export async function importConnectorModule(spec: string, cwd = process.cwd()): Promise<ConnectorModule> {
  const url = resolveModuleSpecifier(spec, cwd);
  try {
    return (await import(url)) as ConnectorModule;
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND') throw moduleNotFound(spec, cwd, e);
    if (code === 'ERR_UNKNOWN_FILE_EXTENSION') {
      throw new KVError(
        'KV_CONNECTOR_MODULE_LOAD_FAILED',
        `Cannot load ${spec}: Node.js cannot import this file type`,
        {
          field: 'kv_connector_module_path',
          cause: e,
          hint: 'Compile TypeScript connectors to .js/.mjs first (or run kvconnect under `node --import tsx`).',
        },
      );
    }
    throw new KVError(
      'KV_CONNECTOR_MODULE_LOAD_FAILED',
      `Importing ${spec} failed: ${(e as Error).message}`,
      {
        field: 'kv_connector_module_path',
        cause: e,
        hint: 'The module threw while loading; fix the error above in the connector module.',
      },
    );
  }
}

function exportedClassNames(mod: ConnectorModule): string[] {
  return Object.entries(mod)
    .filter(([, v]) => typeof v === 'function')
    .map(([k]) => k);
}

function classFromModule(mod: ConnectorModule, className: string, where: string): KVConnectorClass {
  const cls = Object.hasOwn(mod, className) ? mod[className] : undefined;
  if (typeof cls !== 'function') {
    const exports = exportedClassNames(mod);
    const close = closestNames(className, exports);
    throw new KVError('KV_CONNECTOR_CLASS_NOT_FOUND', `Class ${className} not found in ${where}`, {
      field: 'kv_connector',
      hint: `${close.length > 0 ? `did you mean ${close.map((c) => `'${c}'`).join(' or ')}? ` : ''}kv_connector must name an exported class of the module (exports: ${exports.join(', ') || 'none'}).`,
    });
  }
  return cls as KVConnectorClass;
}

/**
 * JS has no keyword arguments, so "accepts kv_cache_config" means the constructor declares a
 * third parameter. `length` is 0 for an inherited constructor or `(...args)`, both fine;
 * 1 or 2 means an explicit constructor that drops kvCacheConfig.
 */
function checkConstructorSignature(cls: KVConnectorClass): void {
  if (cls.length === 1 || cls.length === 2) {
    const message = `Connector ${cls.name} uses deprecated 2-argument constructor signature. External v1 KV connectors must accept kv_cache_config as the third constructor argument and pass it to super().__init__().`;
    log.error(message);
    throw new KVError('KV_CONNECTOR_DEPRECATED_SIGNATURE', message, {
      field: 'kv_connector_module_path',
      hint: `Declare constructor(engineConfig, role, kvCacheConfig) and call super(engineConfig, role, kvCacheConfig) (or omit the constructor). A parameter with a default value is not counted by JavaScript, so declare kvCacheConfig without one.`,
    });
  }
}

// biome-ignore lint/complexity/noStaticOnlyClass: mirrors vLLM's KVConnectorFactory classmethods, the public API.
export class KVConnectorFactory {
  static readonly #registry = new Map<string, ClassLoader>();

  /** Registers a lazy loader; `module` is a loader thunk or a specifier resolved from the cwd. */
  static registerConnector(name: string, module: string | ConnectorModuleLoader, className: string): void {
    if (KVConnectorFactory.#registry.has(name)) {
      throw new KVError('KV_CONNECTOR_ALREADY_REGISTERED', `Connector '${name}' is already registered.`, {
        hint: 'Register each connector name once; pick another name for your connector.',
      });
    }
    const load = typeof module === 'string' ? () => importConnectorModule(module) : module;
    const where = typeof module === 'string' ? module : `the module registered for '${name}'`;
    KVConnectorFactory.#registry.set(name, async () => classFromModule(await load(), className, where));
  }

  static registeredNames(): string[] {
    return [...KVConnectorFactory.#registry.keys()];
  }

  static isRegistered(name: string): boolean {
    return KVConnectorFactory.#registry.has(name);
  }

  static async getConnectorClassByName(name: string): Promise<KVConnectorClass> {
    const loader = KVConnectorFactory.#registry.get(name);
    if (!loader) {
      throw new KVError('KV_CONNECTOR_NOT_REGISTERED', `Connector '${name}' is not registered.`, {
        field: 'kv_connector',
        hint: KVConnectorFactory.unknownNameHint(name),
      });
    }
    return loader();
  }

  static async getConnectorClass(config: KVTransferConfigLike): Promise<KVConnectorClass> {
    const name = config.kv_connector;
    if (name === null || name === undefined) {
      throw new KVError('KV_CONNECTOR_NAME_MISSING', 'Connector name is not set in KVTransferConfig', {
        field: 'kv_connector',
        hint: 'Set "kv_connector" to a registered name (e.g. "NixlConnector") or to the class exported by kv_connector_module_path.',
      });
    }
    const modulePath = config.kv_connector_module_path;
    if (modulePath !== null && modulePath !== undefined && modulePath === '') {
      throw new KVError(
        'KV_CONNECTOR_MODULE_PATH_EMPTY',
        'kv_connector_module_path cannot be an empty string.',
        {
          field: 'kv_connector_module_path',
          hint: 'Remove kv_connector_module_path to use a built-in connector, or set it to a module file (./my-connector.mjs) or package name.',
        },
      );
    }
    if (modulePath) {
      const cls = classFromModule(await importConnectorModule(modulePath), name, modulePath);
      checkConstructorSignature(cls);
      return cls;
    }
    const loader = KVConnectorFactory.#registry.get(name);
    if (!loader) {
      throw new KVError('KV_CONNECTOR_UNSUPPORTED', `Unsupported connector type: ${name}`, {
        field: 'kv_connector',
        hint: KVConnectorFactory.unknownNameHint(name),
      });
    }
    return loader();
  }

  /**
   * vLLM's supports_hma_config: the class's `supportsHMA`, or for MultiConnector, true only if
   * `connectors` is non-empty and every child supports HMA (recursively). Built-ins Node.js
   * cannot run answer from the registry's capability table.
   */
  static async supportsHMAConfig(config: KVTransferConfigLike): Promise<boolean> {
    if (config.kv_connector === MULTI_CONNECTOR_NAME && !config.kv_connector_module_path) {
      const children = multiConnectorChildren(config);
      if (children.length === 0) return false;
      for (const child of children) if (!(await KVConnectorFactory.supportsHMAConfig(child))) return false;
      return true;
    }
    const cls = await KVConnectorFactory.resolveForCapabilities(config);
    return cls.supportsHMA === true;
  }

  /** The class, or for a built-in Node.js cannot run, its static capabilities from the registry. */
  static async resolveForCapabilities(
    config: KVTransferConfigLike,
  ): Promise<Pick<KVConnectorClass, 'supportsHMA'> & { name: string }> {
    try {
      return await KVConnectorFactory.getConnectorClass(config);
    } catch (e) {
      const entry = config.kv_connector ? getBuiltinConnector(config.kv_connector) : undefined;
      if (
        e instanceof KVError &&
        e.code === 'KV_CONNECTOR_NOT_IMPLEMENTED' &&
        entry &&
        !config.kv_connector_module_path
      ) {
        return { name: entry.className, supportsHMA: entry.supportsHMA };
      }
      throw e;
    }
  }

  /** vLLM's create-time HMA check; `disableHybridKvCacheManager` null means auto (never an error). */
  static async checkHMA(engineConfig: EngineConfig, className: string): Promise<void> {
    const config = engineConfig.kvTransferConfig;
    if (!config || engineConfig.scheduler.disableHybridKvCacheManager !== false) return;
    if (!(await KVConnectorFactory.supportsHMAConfig(config))) {
      throw new KVError(
        'KV_CONNECTOR_HMA_UNSUPPORTED',
        `Connector ${className} does not support HMA but HMA is enabled. Please set \`--disable-hybrid-kv-cache-manager\`.`,
        {
          field: 'disable_hybrid_kv_cache_manager',
          hint: 'Add --disable-hybrid-kv-cache-manager (or drop --no-disable-hybrid-kv-cache-manager to let kvconnect decide), or use a connector with HMA support such as NixlConnector or OffloadingConnector.',
        },
      );
    }
  }

  static async createConnector(
    engineConfig: EngineConfig,
    role: KVConnectorRole,
    kvCacheConfig: KVCacheConfig,
  ): Promise<KVConnectorBase> {
    const config = engineConfig.kvTransferConfig;
    if (config === null || config === undefined) {
      throw new KVError(
        'KV_TRANSFER_CONFIG_MISSING',
        'kv_transfer_config must be set to create a connector',
        {
          field: 'kv_transfer_config',
          hint: `Start with a transfer config, e.g. --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}', or do not create a connector when none is configured.`,
        },
      );
    }
    const cls = await KVConnectorFactory.getConnectorClass(config);
    await KVConnectorFactory.checkHMA(engineConfig, cls.name);
    log.info('Creating v1 connector with name: %s and engine_id: %s', cls.name, config.engine_id);
    const Concrete = cls as unknown as new (
      e: EngineConfig,
      r: KVConnectorRole,
      k: KVCacheConfig,
    ) => KVConnectorBase;
    return new Concrete(engineConfig, role, kvCacheConfig);
  }

  static unknownNameHint(name: string): string {
    const close = closestNames(name, KVConnectorFactory.registeredNames());
    const mean = close.length > 0 ? `did you mean ${close.map((c) => `'${c}'`).join(' or ')}? ` : '';
    return `${mean}Connector names are case-sensitive. For your own connector, set kv_connector_module_path to the module that exports class ${name}.`;
  }
}

for (const entry of BUILTIN_CONNECTORS) {
  KVConnectorFactory.registerConnector(
    entry.name,
    entry.load ?? notImplementedLoader(entry),
    entry.className,
  );
}

installConnectorClassResolver((config) => KVConnectorFactory.getConnectorClass(config));
