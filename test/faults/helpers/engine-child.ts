/**
 * Drives fixtures/engine-child.ts: an engine in another process (optionally inside a
 * network namespace), one JSON command per line and one JSON answer per command.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LLMOptions } from '../../../src/engine/llm.ts';

const FIXTURE = fileURLToPath(new URL('../fixtures/engine-child.ts', import.meta.url));

export interface Generated {
  id: string;
  tokenIds: number[];
  finishReason: string | null;
  localTokens: number;
  /** Prompt tokens loaded by the KV connector. */
  externalTokens: number;
  startedAt: number;
  doneAt: number;
}

export interface LogLine {
  level: string;
  message: string;
  at: number;
}

export class EngineChild {
  readonly proc: ChildProcess;
  readonly #waiting = new Map<string, (v: Record<string, unknown>) => void>();
  readonly #ready: Promise<void>;
  readonly #exited: Promise<void>;
  #next = 0;

  /** `wrap` prefixes the node command (e.g. `ip netns exec NS`). */
  constructor(options: LLMOptions, wrap: (argv: string[]) => ChildProcess = defaultSpawn) {
    this.proc = wrap([process.execPath, '--import', 'tsx', FIXTURE, JSON.stringify(options)]);
    this.#exited = new Promise((r) => this.proc.once('exit', () => r()));
    let resolveReady!: () => void;
    this.#ready = new Promise((r) => {
      resolveReady = r;
    });
    let buf = '';
    this.proc.stdout!.on('data', (chunk: Buffer) => {
      buf += chunk.toString();
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const msg = JSON.parse(buf.slice(0, nl)) as Record<string, unknown>;
        buf = buf.slice(nl + 1);
        nl = buf.indexOf('\n');
        if (msg['ready']) resolveReady();
        const key =
          typeof msg['id'] === 'string' ? msg['id'] : (['usage', 'logs', 'p2p'].find((k) => k in msg) ?? '');
        this.#waiting.get(key)?.(msg);
        this.#waiting.delete(key);
      }
    });
  }

  async ready(): Promise<this> {
    await Promise.race([
      this.#ready,
      this.#exited.then(() => {
        throw new Error('the engine child exited before it was ready');
      }),
    ]);
    return this;
  }

  #ask(cmd: Record<string, unknown>, key: string): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      this.#waiting.set(key, (msg) =>
        msg['error'] ? reject(new Error(String(msg['error']))) : resolve(msg),
      );
      void this.#exited.then(() =>
        reject(new Error(`the engine child exited before answering ${cmd['op']}`)),
      );
      this.proc.stdin!.write(`${JSON.stringify(cmd)}\n`);
    });
  }

  async prefill(prompt: string): Promise<Record<string, unknown>> {
    const id = `p${this.#next++}`;
    return (await this.#ask({ op: 'prefill', id, prompt }, id))['params'] as Record<string, unknown>;
  }

  generate(
    prompt: string | number[],
    maxTokens: number,
    params?: Record<string, unknown>,
  ): Promise<Generated> {
    const id = `g${this.#next++}`;
    return this.#ask({ op: 'generate', id, prompt, maxTokens, ...(params ? { params } : {}) }, id) as Promise<
      Record<string, unknown>
    > as Promise<unknown> as Promise<Generated>;
  }

  async usage(): Promise<number> {
    return (await this.#ask({ op: 'usage' }, 'usage'))['usage'] as number;
  }

  /** Staging blocks the child's p2p tier holds (parked chunks, fetches in flight). */
  async p2pHeld(): Promise<number> {
    return (await this.#ask({ op: 'p2p' }, 'p2p'))['p2p'] as number;
  }

  /** Warnings and errors the child logged since the last call (`at` on its clock, as doneAt). */
  async logs(): Promise<LogLine[]> {
    return (await this.#ask({ op: 'logs' }, 'logs'))['logs'] as LogLine[];
  }

  /** When the child logged its first line matching `pattern` (on its clock). */
  async loggedAt(pattern: RegExp): Promise<number> {
    const line = (await this.logs()).find((l) => pattern.test(l.message));
    if (!line) throw new Error(`the engine child logged nothing matching ${pattern}`);
    return line.at;
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
    await this.#exited;
  }
}

function defaultSpawn(argv: string[]): ChildProcess {
  return spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
}
