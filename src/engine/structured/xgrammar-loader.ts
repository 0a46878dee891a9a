/**
 * Loads XGrammar's npm build (`@mlc-ai/web-xgrammar`) under Node.
 *
 * Hand-written because the package's module type is wrong for Node: `lib/index.js` is a UMD
 * bundle (it assigns `exports.*` when `exports` and `module` exist), but the package declares
 * `"type": "module"`, so Node loads the file as an ES module where `exports`, `module` and
 * `require` do not exist and the import yields nothing usable. Evaluating the same file as
 * CommonJS (a function of `exports, module, require, __filename, __dirname`, which is what
 * Node's CommonJS loader does) gives the full API; its WebAssembly is embedded in the file.
 * The bundle is evaluated once per thread, on the first structured-output request.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type * as XGrammar from '@mlc-ai/web-xgrammar';

export type XGrammarModule = typeof XGrammar;

let loaded: XGrammarModule | null = null;

export function loadXGrammar(): XGrammarModule {
  if (loaded) return loaded;
  const require = createRequire(import.meta.url);
  const file = require.resolve('@mlc-ai/web-xgrammar');
  const source = readFileSync(file, 'utf8');
  const module = { exports: {} as Record<string, unknown> };
  const evaluate = new Function('exports', 'module', 'require', '__filename', '__dirname', source);
  evaluate(module.exports, module, createRequire(file), file, path.dirname(file));
  const api = module.exports as unknown as XGrammarModule;
  if (typeof api.GrammarCompiler?.createGrammarCompiler !== 'function')
    throw new Error(
      `@mlc-ai/web-xgrammar at ${file} did not export GrammarCompiler when evaluated as CommonJS`,
    );
  loaded = api;
  return api;
}
