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
