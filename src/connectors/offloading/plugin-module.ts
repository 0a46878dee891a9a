/**
 * Out-of-tree pieces of the OffloadingConnector as JavaScript modules, where vLLM imports a
 * Python module: a secondary tier (`type` + `module_path`), an eviction policy
 * (`eviction_policy` + `cache_policy_module_path`), a spec (`spec_name` +
 * `spec_module_path`). The module path is a file path (absolute, or relative to the working
 * directory) or a package name; the name is the class the module exports. Modules load
 * synchronously (CommonJS, or ES modules without top-level await, which Node 20 can
 * `require`), so a missing module or a wrong export is a configuration error at startup and
 * in `kvconnect check-config`.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { CONFIG_INVALID } from '../../config/config-error.ts';
import { KVError } from '../../errors/kv-error.ts';

/** Any class: called with `new`. */
export type PluginClass = new (...args: never[]) => unknown;

function resolveModule(modulePath: string, field: string): string {
  const fromCwd = createRequire(path.join(process.cwd(), 'noop.js'));
  const isPath = modulePath.startsWith('.') || path.isAbsolute(modulePath);
  try {
    if (isPath) {
      const abs = path.resolve(modulePath);
      if (!existsSync(abs)) throw new Error(`no file ${abs}`);
      return abs;
    }
    return fromCwd.resolve(modulePath);
  } catch (err) {
    throw new KVError(CONFIG_INVALID, `Cannot find module ${JSON.stringify(modulePath)} named by ${field}`, {
      field,
      hint:
        'Give a JavaScript file (absolute, or relative to the working directory, starting with ./) ' +
        'or an installed package name.',
      details: {
        expected: 'a loadable JavaScript module',
        received: modulePath,
        reason: err instanceof Error ? err.message : String(err),
      },
    });
  }
}

/**
 * Loads `modulePath` and returns its export `name`, which must be a class (a function).
 * `field` names the config key of the module path; `nameField` the key that named the class.
 */
export function loadPluginClass(
  modulePath: string,
  name: string,
  field: string,
  nameField: string,
): PluginClass {
  const file = resolveModule(modulePath, field);
  let mod: Record<string, unknown>;
  try {
    mod = createRequire(file)(file) as Record<string, unknown>;
  } catch (err) {
    throw new KVError(CONFIG_INVALID, `Loading ${JSON.stringify(modulePath)} (${field}) failed`, {
      field,
      hint: 'The module must load synchronously: CommonJS, or an ES module without top-level await.',
      details: {
        expected: 'a module that loads',
        received: modulePath,
        reason: err instanceof Error ? err.message : String(err),
      },
    });
  }
  const exported =
    mod[name] ?? (name === 'default' ? undefined : (mod['default'] as Record<string, unknown>)?.[name]);
  if (typeof exported !== 'function') {
    const names = Object.keys(mod).filter((k) => typeof mod[k] === 'function');
    throw new KVError(
      CONFIG_INVALID,
      `Module ${JSON.stringify(modulePath)} has no class ${JSON.stringify(name)}`,
      {
        field: nameField,
        hint: `Export a class named ${name} from ${modulePath}${names.length > 0 ? ` (it exports ${names.join(', ')})` : ''}.`,
        details: {
          expected: `an exported class ${name}`,
          received: exported === undefined ? 'nothing' : typeof exported,
        },
      },
    );
  }
  return exported as PluginClass;
}

/** Throws a configuration error when `instance` lacks one of `methods`. */
export function checkPluginShape(
  instance: unknown,
  methods: readonly string[],
  what: string,
  field: string,
): void {
  const missing = methods.filter(
    (m) => typeof (instance as Record<string, unknown> | null)?.[m] !== 'function',
  );
  if (missing.length === 0) return;
  throw new KVError(CONFIG_INVALID, `${what} lacks ${missing.join(', ')}`, {
    field,
    hint: `Implement ${methods.join(', ')} (docs/connectors/offloading.md#out-of-tree-modules).`,
    details: { expected: `methods ${methods.join(', ')}`, received: `missing ${missing.join(', ')}` },
  });
}
