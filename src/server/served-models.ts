/**
 * The models a server answers to (vLLM's OpenAIServingModels): the served base model and the
 * LoRA adapters registered by --lora-modules or, with VLLM_ALLOW_RUNTIME_LORA_UPDATING,
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter. A request names an adapter as its
 * `model`. Adapter ids count up from 1 and stay with a name across in-place reloads.
 *
 * An adapter path that comes from a request is read only below one of the directories given
 * to --lora-allowed-dirs (after resolving `..` and symbolic links), so a client cannot make
 * the server open arbitrary files; --lora-modules paths come from the operator and are not
 * restricted.
 */
import { realpathSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import type { LoRAModulePath } from '../config/lora-modules.ts';
import type { AsyncEngineLike } from '../engine/api.ts';
import type { LoRARequest } from '../engine/lora/lora-request.ts';
import { adapterNotFoundMessage } from '../engine/lora/peft-adapter.ts';
import { isKVError, KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';

const log = getLogger('kvconnect.server.served-models');

export interface LoraServingOptions {
  /** --lora-modules. */
  modules: readonly LoRAModulePath[];
  /** --lora-allowed-dirs: where request-given adapter paths may point. */
  allowedDirs: readonly string[];
}

interface ServedAdapter {
  request: LoRARequest;
  baseModelName: string | null;
}

function invalidInput(message: string): KVError {
  return new KVError('LORA_REQUEST_INVALID', message, {
    errorType: 'InvalidUserInput',
    hint: 'Send {"lora_name": "<name>", "lora_path": "<adapter directory>"}.',
  });
}

/** The canonical directory, or null when it does not exist. */
function realDir(path: string): string | null {
  try {
    return realpathSync(path);
  } catch {
    return null;
  }
}

export class ServedModels {
  readonly baseModelName: string;
  readonly #engine: AsyncEngineLike;
  readonly #adapters = new Map<string, ServedAdapter>();
  readonly #allowedDirs: string[];
  readonly #modules: readonly LoRAModulePath[];
  #nextId = 1;
  #revision = 0;
  /** Serializes loads and unloads (vLLM holds a lock per name). */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(engine: AsyncEngineLike, baseModelName: string, lora: LoraServingOptions | null) {
    this.#engine = engine;
    this.baseModelName = baseModelName;
    this.#modules = lora?.modules ?? [];
    this.#allowedDirs = (lora?.allowedDirs ?? []).map((d) => realDir(resolve(d)) ?? resolve(d));
  }

  get loraEnabled(): boolean {
    return this.#engine.config.lora != null;
  }

  /** Registers the --lora-modules adapters; throws on the first that does not load. */
  async initStaticLoras(): Promise<void> {
    for (const m of this.#modules) await this.load(m.name, m.path, { baseModelName: m.baseModelName });
  }

  /** vLLM's check_model: null for the base model (or none named), the adapter, or a 404. */
  resolve(model: string | undefined): LoRARequest | null {
    if (model === undefined || model === this.baseModelName) return null;
    const adapter = this.#adapters.get(model);
    if (adapter) return adapter.request;
    throw new KVError('SERVER_MODEL_NOT_FOUND', `The model \`${model}\` does not exist.`, {
      field: 'model',
      hint: `This server serves "${this.baseModelName}"${this.#adapters.size > 0 ? ` and the adapters ${[...this.#adapters.keys()].join(', ')}` : ''} (see GET /v1/models).`,
    });
  }

  /** The /v1/models rows of the adapters (vLLM's LoRA ModelCards). */
  adapterCards(): Array<{ id: string; root: string; parent: string }> {
    return [...this.#adapters.values()].map((a) => ({
      id: a.request.loraName,
      root: a.request.loraPath,
      parent: a.baseModelName ?? this.baseModelName,
    }));
  }

  /** POST /v1/load_lora_adapter; returns vLLM's success text. */
  loadFromRequest(body: Record<string, unknown>): Promise<string> {
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    const path = typeof body.lora_path === 'string' ? body.lora_path : '';
    if (!name || !path)
      return Promise.reject(invalidInput("Both 'lora_name' and 'lora_path' must be provided."));
    const inplace = body.load_inplace === true;
    return this.#serialized(async () => {
      if (!inplace && this.#adapters.has(name)) {
        throw invalidInput(
          `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
        );
      }
      const dir = this.#allowedPath(path);
      await this.#add(name, dir, null);
      return `Success: LoRA adapter '${name}' added successfully.`;
    });
  }

  /** POST /v1/unload_lora_adapter; returns vLLM's success text. */
  unloadFromRequest(body: Record<string, unknown>): Promise<string> {
    const name = typeof body.lora_name === 'string' ? body.lora_name : '';
    if (!name)
      return Promise.reject(invalidInput("'lora_name' needs to be provided to unload a LoRA adapter."));
    return this.#serialized(async () => {
      if (!this.#adapters.has(name)) {
        throw new KVError('LORA_ADAPTER_UNKNOWN', `The lora adapter '${name}' cannot be found.`, {
          hint: 'GET /v1/models lists the loaded adapters.',
        });
      }
      this.#adapters.delete(name);
      log.info("Removed LoRA adapter: name '%s'", name);
      return `Success: LoRA adapter '${name}' removed successfully.`;
    });
  }

  /** Loads an operator-given adapter (--lora-modules). */
  load(name: string, path: string, options: { baseModelName: string | null }): Promise<void> {
    return this.#serialized(() => this.#add(name, path, options.baseModelName));
  }

  async #add(name: string, path: string, baseModelName: string | null): Promise<void> {
    const previous = this.#adapters.get(name);
    const request: LoRARequest = {
      loraName: name,
      loraIntId: previous?.request.loraIntId ?? this.#nextId,
      loraPath: path,
      revision: ++this.#revision,
    };
    if (!this.#engine.addLora) {
      throw new KVError('SERVER_NOT_IMPLEMENTED', 'This engine cannot serve LoRA adapters', {
        hint: 'Serve with kvconnect’s engine and --enable-lora.',
      });
    }
    try {
      await this.#engine.addLora(request);
    } catch (e) {
      if (isKVError(e) && e.code === 'LORA_ADAPTER_NOT_FOUND') {
        throw new KVError('LORA_ADAPTER_NOT_FOUND', adapterNotFoundMessage(name, path), {
          hint: e.hint ?? 'Check the adapter directory.',
        });
      }
      // vLLM answers every other failure of add_lora with a 500 carrying its message.
      if (isKVError(e) && e.status < 500)
        throw new KVError('LORA_ADAPTER_INVALID', e.message, {
          ...(e.hint ? { hint: e.hint } : {}),
          cause: e,
        });
      throw e;
    }
    if (!previous) this.#nextId += 1;
    const base = baseModelName !== null && baseModelName === this.baseModelName ? baseModelName : null;
    this.#adapters.set(name, { request, baseModelName: base });
    log.info("Loaded new LoRA adapter: name '%s', path '%s'", name, path);
  }

  /** The adapter directory a request names, if it lies below an allowed directory. */
  #allowedPath(path: string): string {
    const refuse = (why: string): KVError =>
      new KVError('LORA_PATH_NOT_ALLOWED', `The adapter path ${JSON.stringify(path)} ${why}`, {
        field: 'lora_path',
        hint:
          this.#allowedDirs.length === 0
            ? 'Start the server with --lora-allowed-dirs <dir> to load adapters from a directory at run time.'
            : `Put the adapter below one of --lora-allowed-dirs (${this.#allowedDirs.join(', ')}).`,
      });
    if (this.#allowedDirs.length === 0)
      throw refuse('cannot be loaded: no --lora-allowed-dirs are configured');
    const absolute = resolve(path);
    // Symbolic links are followed before the check: a link inside an allowed directory
    // that points outside it is refused. A path that does not exist is checked as written
    // (the engine then answers "No adapter found").
    const real = realDir(absolute) ?? absolute;
    const inside = this.#allowedDirs.some((dir) => {
      const rel = relative(dir, real);
      return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
    });
    if (!inside) throw refuse('lies outside the directories given to --lora-allowed-dirs');
    return real;
  }

  #serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(work, work);
    this.#queue = run.catch(() => undefined);
    return run;
  }
}
