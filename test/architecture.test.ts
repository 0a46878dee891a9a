/**
 * The layering of docs/architecture.md, enforced: every import between folders of src/ must
 * be allowed by LAYERS, and no module may take part in a runtime import cycle. Value and
 * dynamic imports come from esbuild's module graph (what Node actually loads); type-only
 * imports, which esbuild drops, from the `import type` / `export type` statements. And the
 * environment is read only through its registry, src/util/envs.ts.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SRC = join(ROOT, 'src');

/** Which layers each layer may import (its own files always). `connectors/*` is any one connector. */
const LAYERS: Record<string, readonly string[]> = {
  errors: [],
  logging: ['util'],
  util: [],
  wire: ['errors'],
  http: ['wire', 'errors', 'util'],
  config: ['wire', 'errors', 'logging', 'util'],
  kv: ['config', 'wire', 'errors', 'logging', 'util'],
  tokenizer: ['config', 'wire', 'errors', 'logging', 'util'],
  'kv-events': ['config', 'wire', 'errors', 'logging', 'util'],
  transfer: ['wire', 'errors', 'logging', 'util'],
  connector: ['config', 'kv', 'wire', 'errors', 'logging', 'util'],
  'connectors/*': ['connector', 'transfer', 'kv', 'config', 'wire', 'errors', 'logging', 'util'],
  engine: ['connector', 'kv', 'kv-events', 'tokenizer', 'config', 'wire', 'errors', 'logging', 'util'],
  server: ['engine', 'connector', 'config', 'http', 'wire', 'errors', 'logging', 'util'],
  proxy: ['config', 'http', 'kv', 'kv-events', 'tokenizer', 'wire', 'errors', 'logging', 'util'],
  demo: ['proxy', 'connector', 'config', 'wire', 'errors', 'logging', 'util'],
  'bench-serve': ['wire', 'errors', 'logging', 'util'],
  'bench-trace': ['bench-serve', 'engine', 'connector', 'config', 'wire', 'errors', 'logging', 'util'],
  cli: ['*'],
  '(root)': ['*'],
};

/** Edges allowed only as a dynamic import: the registry's lazy connector loaders. */
const LAZY: Record<string, readonly string[]> = { connector: ['connectors/*'] };

/** Folders other layers enter only through their index.ts: the transfer agent's API, http, each connector. */
const INDEX_ONLY: readonly string[] = ['transfer', 'http', 'connectors/*'];

type EdgeKind = 'static' | 'dynamic' | 'type';
interface Edge {
  from: string;
  to: string;
  kind: EdgeKind;
}

/** The layer of a path relative to src/: its top folder, or `connectors/<name>`. */
function layerOf(file: string): string {
  const parts = file.split('/');
  if (parts.length === 1) return '(root)';
  return parts[0] === 'connectors' ? `connectors/${parts[1]}` : parts[0]!;
}

function tableKey(layer: string): string {
  return layer.startsWith('connectors/') ? 'connectors/*' : layer;
}

/** Edges that cross layers without the table's permission, as readable lines. */
function layerViolations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const from = layerOf(e.from);
    const to = layerOf(e.to);
    if (from === to) continue;
    const allowed = LAYERS[tableKey(from)];
    if (allowed === undefined) {
      out.push(`${e.from}: folder ${from} is not in the layer table`);
      continue;
    }
    if (allowed.includes('*') || allowed.includes(tableKey(to))) continue;
    if (e.kind === 'dynamic' && LAZY[tableKey(from)]?.includes(tableKey(to))) continue;
    out.push(`${e.from} -> ${e.to} (${e.kind}): ${from} may not import ${to}`);
  }
  return out;
}

/** Edges into an INDEX_ONLY folder from another layer that do not go through its index.ts. */
function indexViolations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    const to = layerOf(e.to);
    if (layerOf(e.from) === to || !INDEX_ONLY.includes(tableKey(to))) continue;
    if (e.to !== `${to}/index.ts`)
      out.push(`${e.from} -> ${e.to} (${e.kind}): import ${to}/index.ts instead`);
  }
  return out;
}

/** Every cycle of static imports (one per strongly connected component), as file lists. */
function importCycles(edges: readonly Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) {
    if (e.kind !== 'static') continue;
    next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  }
  // Tarjan's strongly connected components.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || next.get(v)?.includes(v)) cycles.push(scc.sort());
  };
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sourceFiles(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

/** The one module of src/ that touches `process.env` (docs/environment.md). */
const ENV_REGISTRY = 'util/envs.ts';

/** Files of src/ (paths relative to src/) that touch `process.env` outside the registry. */
function envReadsOutsideRegistry(sources: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const [file, text] of sources) {
    if (file === ENV_REGISTRY) continue;
    const line = text
      .split('\n')
      .findIndex((l) =>
        /\bprocess\s*\.\s*env\b|\bprocess\s*\[\s*['"]env['"]\s*\]|\{[^}]*\benv\b[^}]*\}\s*=\s*process\b/.test(
          l,
        ),
      );
    if (line >= 0) out.push(`${file}:${line + 1} reads process.env; use readEnv() of ${ENV_REGISTRY}`);
  }
  return out;
}

/** The logger name of a module: `kvconnect.` + its path under src/, `/` → `.`, no extension. */
function loggerName(file: string): string {
  return `kvconnect.${file.replace(/\.ts$/, '').split('/').join('.')}`;
}

/** getLogger() calls of src/ whose name is not the module's loggerName(). */
function loggerNameViolations(sources: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const [file, text] of sources) {
    if (file === 'logging/logger.ts') continue;
    for (const m of text.matchAll(/\bgetLogger\(\s*([^)]*?)\s*\)/g)) {
      const expected = `'${loggerName(file)}'`;
      if (m[1] !== expected) out.push(`${file}: getLogger(${m[1]}) should be getLogger(${expected})`);
    }
  }
  return out;
}

/** Every file of src/ by its path relative to src/, with its text. */
function sourceTexts(): Map<string, string> {
  return new Map(
    sourceFiles(SRC).map((f) => [relative(SRC, f).split('\\').join('/'), readFileSync(f, 'utf8')]),
  );
}

/** TypeScript `private` members of src/ (`#` names are the house style; a constructor cannot be one). */
function tsPrivateMembers(sources: ReadonlyMap<string, string>): string[] {
  const out: string[] = [];
  for (const [file, text] of sources) {
    text.split('\n').forEach((line, i) => {
      if (
        /^\s*(?:(?:static|protected|public|override|readonly|abstract)\s+)*private\s+(?!constructor\b)/.test(
          line,
        )
      ) {
        out.push(`${file}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  return out;
}

const TYPE_ONLY = /^(?:import|export) type\b[^;]*?\bfrom\s+'(\.[^']+)'/gm;

/** Every import between files of src/, paths relative to src/. */
async function sourceGraph(): Promise<Edge[]> {
  const files = sourceFiles(SRC);
  const result = await build({
    entryPoints: files,
    absWorkingDir: ROOT,
    bundle: true,
    write: false,
    metafile: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    packages: 'external',
    outdir: join(ROOT, 'dist-architecture'),
    tsconfig: join(ROOT, 'tsconfig.json'),
    logLevel: 'silent',
  });
  const toSrc = (p: string): string => posix.normalize(relative(SRC, join(ROOT, p)).split('\\').join('/'));
  const edges: Edge[] = [];
  for (const [input, meta] of Object.entries(result.metafile.inputs)) {
    if (!input.startsWith('src/')) continue;
    for (const imp of meta.imports) {
      if (imp.external || !imp.path.startsWith('src/')) continue;
      edges.push({
        from: toSrc(input),
        to: toSrc(imp.path),
        kind: imp.kind === 'dynamic-import' ? 'dynamic' : 'static',
      });
    }
  }
  for (const file of files) {
    for (const m of readFileSync(file, 'utf8').matchAll(TYPE_ONLY)) {
      const target = join(dirname(file), m[1]!);
      edges.push({ from: relative(SRC, file), to: relative(SRC, target), kind: 'type' });
    }
  }
  return edges;
}

describe('architecture', () => {
  test('src/ follows the layer table (value, dynamic and type imports)', async () => {
    const edges = await sourceGraph();
    assert.ok(edges.length > 500, `the graph looks incomplete: ${edges.length} edges`);
    assert.ok(
      edges.some((e) => e.kind === 'dynamic' && e.from === 'connector/registry.ts'),
      'the registry loads connectors lazily',
    );
    assert.ok(edges.some((e) => e.kind === 'type'));
    assert.deepEqual(layerViolations(edges), []);
  });

  test(`other layers enter ${INDEX_ONLY.join(', ')} only through their index.ts`, async () => {
    const edges = await sourceGraph();
    assert.ok(edges.some((e) => e.from.startsWith('connectors/nixl/') && e.to === 'transfer/index.ts'));
    assert.deepEqual(indexViolations(edges), []);
    assert.deepEqual(
      indexViolations([
        { from: 'connectors/nixl/worker.ts', to: 'transfer/index.ts', kind: 'static' },
        { from: 'connectors/nixl/worker.ts', to: 'transfer/types.ts', kind: 'type' },
        { from: 'transfer/agent.ts', to: 'transfer/types.ts', kind: 'static' },
        { from: 'proxy/server.ts', to: 'http/router.ts', kind: 'static' },
        { from: 'connector/registry.ts', to: 'connectors/nixl/connector.ts', kind: 'dynamic' },
        { from: 'connectors/nixl/worker.ts', to: 'connectors/nixl/metadata.ts', kind: 'static' },
      ]),
      [
        'connectors/nixl/worker.ts -> transfer/types.ts (type): import transfer/index.ts instead',
        'proxy/server.ts -> http/router.ts (static): import http/index.ts instead',
        'connector/registry.ts -> connectors/nixl/connector.ts (dynamic): import connectors/nixl/index.ts instead',
      ],
    );
  });

  test("every module's logger is named kvconnect.<its path>", () => {
    const sources = sourceTexts();
    assert.ok([...sources.values()].filter((t) => t.includes('getLogger(')).length > 40, 'loggers found');
    assert.deepEqual(loggerNameViolations(sources), []);
    assert.deepEqual(
      loggerNameViolations(
        new Map([
          ['transfer/side-channel.ts', "const log = getLogger('kvconnect.transfer.side-channel');"],
          ['proxy/backend-pool.ts', "const log = getLogger('proxy');"],
          ['kv-events/publisher.ts', 'const log = getLogger(name);'],
        ]),
      ),
      [
        "proxy/backend-pool.ts: getLogger('proxy') should be getLogger('kvconnect.proxy.backend-pool')",
        "kv-events/publisher.ts: getLogger(name) should be getLogger('kvconnect.kv-events.publisher')",
      ],
    );
  });

  test('src/ keeps members private with # names, not the private keyword (constructors excepted)', () => {
    assert.deepEqual(tsPrivateMembers(sourceTexts()), []);
    assert.deepEqual(
      tsPrivateMembers(
        new Map([
          [
            'a.ts',
            'class A {\n  private readonly x = 1;\n  private static y = 2;\n  #z = 3;\n  private constructor() {}\n  // private notes\n}',
          ],
        ]),
      ),
      ['a.ts:2: private readonly x = 1;', 'a.ts:3: private static y = 2;'],
    );
  });

  test('src/ has no runtime import cycle', async () => {
    assert.deepEqual(importCycles(await sourceGraph()), []);
  });

  test(`src/ reads the environment only through ${ENV_REGISTRY}`, () => {
    const sources = sourceTexts();
    assert.ok(sources.get(ENV_REGISTRY)?.includes('process.env'), 'the registry reads process.env');
    assert.deepEqual(envReadsOutsideRegistry(sources), []);
    assert.deepEqual(
      envReadsOutsideRegistry(
        new Map([
          ['util/envs.ts', 'process.env'],
          ['server/x.ts', "const a = 1;\nconst k = process.env['OPENAI_API_KEY'];"],
          ['demo/y.ts', 'spawn(c, { env: { ...process .env } });'],
          ['kv/z.ts', "const { env } = process;\nprocess['env'];"],
        ]),
      ),
      [
        'server/x.ts:2 reads process.env; use readEnv() of util/envs.ts',
        'demo/y.ts:1 reads process.env; use readEnv() of util/envs.ts',
        'kv/z.ts:1 reads process.env; use readEnv() of util/envs.ts',
      ],
    );
  });

  test('the checks find a forbidden edge, a non-lazy connector import and a cycle', () => {
    const bad: Edge[] = [
      { from: 'config/types.ts', to: 'kv/interfaces.ts', kind: 'type' },
      { from: 'connectors/moriio/scheduler.ts', to: 'connectors/nixl/index.ts', kind: 'static' },
      { from: 'connector/registry.ts', to: 'connectors/nixl/index.ts', kind: 'static' },
      { from: 'connector/registry.ts', to: 'connectors/nixl/index.ts', kind: 'dynamic' },
      { from: 'demo/x.ts', to: 'cli/program.ts', kind: 'static' },
      { from: 'cli/program.ts', to: 'demo/x.ts', kind: 'static' },
      { from: 'newfolder/a.ts', to: 'errors/index.ts', kind: 'static' },
      { from: 'wire/kvconnect-info.ts', to: 'logging/logger.ts', kind: 'static' },
      { from: 'wire/index.ts', to: 'errors/index.ts', kind: 'static' },
    ];
    assert.deepEqual(layerViolations(bad), [
      'config/types.ts -> kv/interfaces.ts (type): config may not import kv',
      'connectors/moriio/scheduler.ts -> connectors/nixl/index.ts (static): connectors/moriio may not import connectors/nixl',
      'connector/registry.ts -> connectors/nixl/index.ts (static): connector may not import connectors/nixl',
      'demo/x.ts -> cli/program.ts (static): demo may not import cli',
      'newfolder/a.ts: folder newfolder is not in the layer table',
      'wire/kvconnect-info.ts -> logging/logger.ts (static): wire may not import logging',
    ]);
    assert.deepEqual(importCycles(bad), [['cli/program.ts', 'demo/x.ts']]);
    assert.deepEqual(
      importCycles([
        { from: 'a.ts', to: 'b.ts', kind: 'static' },
        { from: 'b.ts', to: 'a.ts', kind: 'type' },
        { from: 'b.ts', to: 'a.ts', kind: 'dynamic' },
      ]),
      [],
      'type-only and dynamic imports do not make a runtime cycle',
    );
  });
});
