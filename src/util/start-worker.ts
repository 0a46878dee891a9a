/**
 * Starts a worker thread on a module that sits next to the caller. Callers pass their own
 * `import.meta.url` and the entry's base name; the entry is `<name>.js` in dist/ and
 * `<name>.ts` when running sources under tsx (tests, `npm run kvconnect`). Node 20 does not
 * run the inherited `--import tsx` inside worker threads, so for a .ts entry a one-line
 * bootstrap registers tsx's loader first, then imports the entry.
 *
 * tsx's loader costs each worker a loader thread of its own and a round trip per module. An
 * entry whose module graph is `selfContained` (relative imports and Node.js builtins only,
 * nothing imported by a path computed at run time) is instead bundled by esbuild (tsx's own
 * compiler), each file keeping its own `import.meta.url`, into a file named by its content in
 * this user's own directory under the temporary directory (`kvconnect-worker-bundles-<uid>/`;
 * source-mapped to the .ts files), reused while none of its input files changed. The worker
 * gets the bundle's URL as its first message, so the caller must not post to the worker before
 * it reports ready. A graph that turns out otherwise (a package import, a dynamic `import()`,
 * other `import.meta` use), a directory that is not this user's alone, or a failed build falls
 * back to tsx's loader.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { lstat, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire, isBuiltin } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { threadId, Worker } from 'node:worker_threads';

export interface ModuleWorkerOptions {
  /** The entry's module graph needs no loader at run time (see above). */
  selfContained?: boolean;
}

export function startModuleWorker(
  callerUrl: string,
  entryBaseName: string,
  workerData: unknown,
  { selfContained = false }: ModuleWorkerOptions = {},
): Worker {
  const isTs = callerUrl.endsWith('.ts');
  const entry = new URL(`./${entryBaseName}.${isTs ? 'ts' : 'js'}`, callerUrl);
  if (!isTs) return new Worker(entry, { workerData });
  const tsxApi = import.meta.resolve('tsx/esm/api');
  const viaTsx = `import(${JSON.stringify(tsxApi)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); })`;
  if (!selfContained) {
    return new Worker(`${viaTsx}.catch((e) => { console.error(e); process.exit(1); });`, {
      eval: true,
      workerData,
    });
  }
  const bootstrap = `import('node:worker_threads')
  .then(({ parentPort }) => new Promise((resolve) => parentPort.once('message', resolve)))
  .then(({ bundle }) => {
    if (bundle === null) return ${viaTsx};
    process.setSourceMapsEnabled(true);
    return import(bundle);
  })
  .catch((e) => { console.error(e); process.exit(1); });`;
  const worker = new Worker(bootstrap, { eval: true, workerData });
  void bundled(entry, createRequire(tsxApi).resolve('esbuild')).then((bundle) =>
    worker.postMessage({ bundle }),
  );
  return worker;
}

/** The subset of esbuild's API used here. */
interface Esbuild {
  build(options: Record<string, unknown>): Promise<{
    outputFiles: Array<{ text: string }>;
    metafile: {
      inputs: Record<string, unknown>;
      outputs: Record<string, { imports: Array<{ path: string }> }>;
    };
  }>;
  stop(): Promise<void> | void;
}

/** Builds under way, so that workers started together wait for one build. */
const building = new Map<string, Promise<string | null>>();

/** The URL of `entry` and its module graph as one ES module, or null when the graph needs a loader. */
function bundled(entry: URL, esbuildPath: string): Promise<string | null> {
  let bundle = building.get(entry.href);
  if (bundle === undefined) {
    bundle = build(entry, esbuildPath)
      .catch(() => null)
      .finally(() => building.delete(entry.href));
    building.set(entry.href, bundle);
  }
  return bundle;
}

/** This user's own: the modules run from it (another user's files there would run as ours). */
const BUNDLE_DIR = join(tmpdir(), `kvconnect-worker-bundles-${process.getuid?.() ?? 'user'}`);

const sha256 = (data: string): string => createHash('sha256').update(data).digest('hex').slice(0, 32);

/** Writes `text` to `file` whole (another process may be writing the same file). */
async function writeWhole(file: string, text: string): Promise<void> {
  const partial = `${file}.${process.pid}.${threadId}`;
  await writeFile(partial, text);
  await rename(partial, file);
}

/** What the last build of an entry read (each file's content hash) and what it gave. */
interface BuildRecord {
  inputs: Record<string, string>;
  bundle: string | null;
}

async function unchanged(record: BuildRecord): Promise<boolean> {
  for (const [path, hash] of Object.entries(record.inputs)) {
    if (sha256(await readFile(path, 'utf8')) !== hash) return false;
  }
  return record.bundle === null || existsSync(fileURLToPath(record.bundle));
}

/** The previous build's result while none of its inputs changed (checked each time), else a new build. */
async function build(entry: URL, esbuildPath: string): Promise<string | null> {
  await mkdir(BUNDLE_DIR, { recursive: true, mode: 0o700 });
  const dir = await lstat(BUNDLE_DIR);
  const mine = dir.isDirectory() && dir.uid === (process.getuid?.() ?? dir.uid) && (dir.mode & 0o022) === 0;
  if (!mine) return null;
  const recordFile = join(BUNDLE_DIR, `${sha256(entry.href)}.json`);
  try {
    const record = JSON.parse(await readFile(recordFile, 'utf8')) as BuildRecord;
    if (await unchanged(record)) return record.bundle;
  } catch {
    // no record yet, or one being replaced: build
  }
  const record = await buildAnew(entry, esbuildPath);
  await writeWhole(recordFile, JSON.stringify(record));
  return record.bundle;
}

async function buildAnew(entry: URL, esbuildPath: string): Promise<BuildRecord> {
  const esbuild = (await import(pathToFileURL(esbuildPath).href)) as Esbuild;
  try {
    const out = await esbuild.build({
      entryPoints: [fileURLToPath(entry)],
      bundle: true,
      format: 'esm',
      platform: 'node',
      packages: 'external',
      target: 'node20',
      write: false,
      metafile: true,
      logLevel: 'silent',
      sourcemap: 'inline',
      sourcesContent: false,
      absWorkingDir: '/',
      sourceRoot: 'file:///',
      plugins: [
        {
          name: 'module-url',
          setup(b: { onLoad(o: { filter: RegExp }, f: (a: { path: string }) => Promise<unknown>): void }) {
            b.onLoad({ filter: /\.[cm]?ts$/ }, async ({ path }) => ({
              loader: 'ts',
              contents: (await readFile(path, 'utf8')).replaceAll(
                'import.meta.url',
                JSON.stringify(pathToFileURL(path).href),
              ),
            }));
          },
        },
      ],
    });
    const inputs: Record<string, string> = {};
    for (const path of Object.keys(out.metafile.inputs)) {
      const abs = `/${path}`;
      inputs[abs] = sha256(await readFile(abs, 'utf8'));
    }
    const text = out.outputFiles[0]?.text ?? '';
    const imports = Object.values(out.metafile.outputs).flatMap((o) => o.imports);
    const needsLoader =
      !imports.every((i) => isBuiltin(i.path)) || /\bimport\s*\(|\bimport\.meta\b/.test(text);
    if (needsLoader) return { inputs, bundle: null };
    // A file (not a data: URL) so that stack traces name it briefly; named by its content.
    const file = join(BUNDLE_DIR, `${sha256(text)}.mjs`);
    if (!existsSync(file)) await writeWhole(file, text);
    return { inputs, bundle: pathToFileURL(file).href };
  } finally {
    await esbuild.stop();
  }
}

/**
 * Resolves with the value a worker announces once it has started. `classify` reads each
 * message: `{ ready: value }`, `{ failed: error }`, or undefined for messages to ignore.
 * A worker error or exit before that rejects (`exitError(code)` builds the exit's error).
 */
export function waitForWorkerReady<M, T>(
  worker: Worker,
  classify: (msg: M) => { ready: T } | { failed: Error } | undefined,
  exitError: (code: number) => Error,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (msg: M): void => {
      const verdict = classify(msg);
      if (!verdict) return;
      cleanup();
      if ('ready' in verdict) resolve(verdict.ready);
      else reject(verdict.failed);
    };
    const onError = (e: Error): void => {
      cleanup();
      reject(e);
    };
    const onExit = (code: number): void => {
      cleanup();
      reject(exitError(code));
    };
    const cleanup = (): void => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  });
}

/**
 * Ends a worker that was asked to finish (it closes its port once done): waits up to
 * `graceMs` for it to exit on its own, and only then terminates it. Terminating a worker
 * while V8 still runs background compile jobs for it can abort the whole Node 20 process
 * (`NodePlatform::ForIsolate` assertion, seen once in the test suite), so a clean exit is
 * preferred.
 */
export async function stopWorker(worker: Worker, graceMs = 2000): Promise<void> {
  if (worker.threadId < 0) return;
  let timer: NodeJS.Timeout | undefined;
  const exited = await Promise.race([
    new Promise<boolean>((resolve) => worker.once('exit', () => resolve(true))),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), graceMs);
    }),
  ]);
  clearTimeout(timer);
  if (!exited) await worker.terminate();
}
