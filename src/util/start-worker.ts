/**
 * Starts a worker thread on a module that sits next to the caller. Callers pass their own
 * `import.meta.url` and the entry's base name; the entry is `<name>.js` in dist/ and
 * `<name>.ts` when running sources under tsx (tests, `npm run kvconnect`). Node 20 does not
 * run the inherited `--import tsx` inside worker threads, so for a .ts entry a one-line
 * bootstrap registers tsx's loader first, then imports the entry.
 */
import { Worker } from 'node:worker_threads';

export function startModuleWorker(callerUrl: string, entryBaseName: string, workerData: unknown): Worker {
  const isTs = callerUrl.endsWith('.ts');
  const entry = new URL(`./${entryBaseName}.${isTs ? 'ts' : 'js'}`, callerUrl);
  if (!isTs) return new Worker(entry, { workerData });
  const tsxApi = import.meta.resolve('tsx/esm/api');
  const bootstrap = `import(${JSON.stringify(tsxApi)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry.href)}); }).catch((e) => { console.error(e); process.exit(1); });`;
  return new Worker(bootstrap, { eval: true, workerData });
}
