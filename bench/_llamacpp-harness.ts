/**
 * llama.cpp measured with nothing in between: bench/llamacpp-harness.c, compiled at bench
 * time with gcc against the llama.cpp source node-llama-cpp ships (its git bundle, cloned
 * into a temporary directory for the headers) and linked to node-llama-cpp's prebuilt shared
 * libraries. No network, no llama.cpp build. Each model runs in its own harness process,
 * fed token ids over stdin; its times are taken around llama_decode in C, so neither
 * node-llama-cpp's per-token hops nor this process's event loop are in them.
 */
import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const SOURCE = fileURLToPath(new URL('./llamacpp-harness.c', import.meta.url));

/** The compiled harness and the directory of llama.cpp's libraries it runs against. */
export interface LlamaCppHarnessBuild {
  binary: string;
  libDir: string;
  /** Removes the temporary directory. */
  dispose(): void;
}

function fail(what: string, fix: string): never {
  throw new Error(`llama.cpp harness: ${what}; ${fix}`);
}

/** node-llama-cpp's prebuilt libraries for this platform and its llama.cpp source bundle. */
function locate(): { libDir: string; bundle: string } {
  const require = createRequire(import.meta.url);
  const target = `${platform()}-${arch()}`;
  let pkg: string;
  try {
    // Its exports hide package.json: up from dist/index.js.
    pkg = dirname(dirname(require.resolve(`@node-llama-cpp/${target}`)));
  } catch {
    fail(
      `no prebuilt llama.cpp for ${target} (@node-llama-cpp/${target} is not installed)`,
      'run the benchmark on linux-x64, where npm ci installs it',
    );
  }
  const libDir = join(pkg, 'bins', target);
  const bundle = join(dirname(dirname(require.resolve('node-llama-cpp'))), 'llama', 'gitRelease.bundle');
  if (!existsSync(bundle))
    fail(`node-llama-cpp has no llama.cpp source bundle at ${bundle}`, 'reinstall it with npm ci');
  return { libDir, bundle };
}

/** Clones the headers out of the bundle and compiles the harness (a few seconds). */
export function buildLlamaCppHarness(): LlamaCppHarnessBuild {
  const { libDir, bundle } = locate();
  const libs = readdirSync(libDir);
  const lib = (prefix: string): string =>
    libs.find((f) => f.startsWith(prefix) && f.endsWith('.so')) ??
    fail(`no ${prefix}*.so in ${libDir}`, 'reinstall node-llama-cpp with npm ci');
  const dir = mkdtempSync(join(tmpdir(), 'kvc-llamacpp-harness-'));
  try {
    const src = join(dir, 'llama.cpp');
    const run = (cmd: string, args: string[]): void => {
      try {
        execFileSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
      } catch (e) {
        const err = e as Error & { stderr?: Buffer };
        fail(`${cmd} failed: ${err.stderr?.toString().trim() || err.message}`, `install ${cmd}`);
      }
    };
    run('git', ['clone', '--quiet', '--no-checkout', bundle, src]);
    run('git', ['-C', src, 'checkout', '--quiet', 'HEAD', '--', 'include', 'ggml/include']);
    const binary = join(dir, 'llamacpp-harness');
    run('gcc', [
      '-O2',
      '-o',
      binary,
      SOURCE,
      `-I${join(src, 'include')}`,
      `-I${join(src, 'ggml', 'include')}`,
      `-L${libDir}`,
      `-l:${lib('libllama.')}`,
      `-l:${lib('libggml.')}`,
      `-l:${lib('libggml-base.')}`,
      `-Wl,-rpath,${libDir}`,
    ]);
    rmSync(src, { recursive: true, force: true });
    return { binary, libDir, dispose: () => rmSync(dir, { recursive: true, force: true }) };
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

export interface LlamaCppHarnessOptions {
  threads: number;
  /** Prompt plus generated tokens the context must hold. */
  contextSize: number;
  kvCache: 'f16' | 'f32';
  flashAttention: 'auto' | 'on' | 'off';
}

/** One GGUF model in one harness process. */
export class LlamaCppHarness {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: AsyncIterator<string>;
  readonly #rl: Interface;
  #stderr = '';

  private constructor(child: ChildProcessWithoutNullStreams) {
    this.#child = child;
    child.stderr.on('data', (d: Buffer) => {
      this.#stderr += d.toString();
    });
    this.#rl = createInterface({ input: child.stdout });
    this.#lines = this.#rl[Symbol.asyncIterator]();
  }

  static async open(
    build: LlamaCppHarnessBuild,
    modelPath: string,
    o: LlamaCppHarnessOptions,
  ): Promise<LlamaCppHarness> {
    const h = new LlamaCppHarness(
      spawn(build.binary, [
        build.libDir,
        modelPath,
        String(o.threads),
        String(o.contextSize),
        o.kvCache,
        o.flashAttention,
      ]),
    );
    const first = await h.#lines.next();
    if (first.done || !String(first.value).startsWith('ready ')) {
      h.#child.kill();
      throw new Error(`llama.cpp harness did not start on ${modelPath}: ${h.#stderr.trim() || 'no output'}`);
    }
    return h;
  }

  /**
   * Greedy decoding from an empty KV cache: the prompt as one batch, then `maxTokens` tokens.
   * prefillMs covers the prompt and the first token, decodeMs the tokens after it.
   */
  async greedy(
    promptIds: readonly number[],
    maxTokens: number,
  ): Promise<{ tokens: number[]; prefillMs: number; decodeMs: number }> {
    this.#child.stdin.write(`${maxTokens} ${promptIds.join(' ')}\n`);
    const next = await this.#lines.next();
    if (next.done) throw new Error(`llama.cpp harness exited: ${this.#stderr.trim() || 'no message'}`);
    const [prefillNs, decodeNs, ...tokens] = String(next.value).split(' ').map(Number);
    if (tokens.length !== maxTokens) throw new Error(`llama.cpp harness answered '${next.value}'`);
    return { tokens, prefillMs: prefillNs! / 1e6, decodeMs: decodeNs! / 1e6 };
  }

  async dispose(): Promise<void> {
    const exited = new Promise<void>((resolve) => this.#child.once('exit', () => resolve()));
    this.#child.stdin.end();
    this.#rl.close();
    if (this.#child.exitCode === null) await exited;
  }
}
