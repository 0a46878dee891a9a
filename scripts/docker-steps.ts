/**
 * Runs the Dockerfile's steps as a plain script, for machines where no container runtime
 * works: a clean clone of a commit (uncommitted changes are not in it) is the build context,
 * each stage gets its own directory standing for its filesystem root, and WORKDIR, COPY
 * (with .dockerignore), ENV and RUN happen there. RUN lines that install Debian packages are
 * not run; the packages they name must be installed on this machine (checked with dpkg).
 * Then the final stage's ENTRYPOINT runs `--help`, `serve` on the bundled model answers a
 * completion, and `proxy` in front of it answers the same one: the install the image would
 * hold works.
 *
 *   node --import tsx scripts/docker-steps.ts [--ref REV] [--keep]
 *
 * --ref: the commit to build (default HEAD); --keep: leave the temporary directory. What this
 * does not show: that the base image (node:20-bookworm-slim) has what this machine has, or that
 * the layers, USER and EXPOSE are right; docs/deploy.md says what was and was not run. It
 * takes minutes (npm ci, the native build, tsc), so it is a manual or CI step, not part of
 * `npm test`. Prints each step, then one JSON object.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join, posix, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface Instruction {
  op: string;
  /** The text after the instruction's name, continuation lines joined. */
  args: string;
  line: number;
}

export interface Stage {
  name: string;
  base: string;
  steps: Instruction[];
}

/** Stages with their instructions; `${VAR}` of global ARGs substituted in FROM, as Docker does. */
export function parseDockerfile(text: string): Stage[] {
  const lines = text.split('\n');
  const instructions: Instruction[] = [];
  for (let i = 0; i < lines.length; i++) {
    const start = i;
    let line = lines[i] ?? '';
    if (/^\s*(#|$)/.test(line)) continue;
    while (line.endsWith('\\') && i + 1 < lines.length) {
      i++;
      const next = lines[i] ?? '';
      if (/^\s*#/.test(next)) continue;
      line = `${line.slice(0, -1)} ${next.trim()}`;
    }
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`Dockerfile line ${start + 1}: cannot read ${JSON.stringify(line)}`);
    instructions.push({ op: (m[1] as string).toUpperCase(), args: (m[2] as string).trim(), line: start + 1 });
  }
  const globals: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.op === 'ARG' && stages.length === 0) {
      const [k, v = ''] = ins.args.split('=', 2);
      globals[(k as string).trim()] = v.trim();
    } else if (ins.op === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`Dockerfile line ${ins.line}: FROM ${ins.args}`);
      const base = (m[1] as string).replace(/\$\{(\w+)\}|\$(\w+)/g, (_, a, b) => globals[a ?? b] ?? '');
      stages.push({ name: m[2] ?? String(stages.length), base, steps: [] });
    } else {
      const stage = stages.at(-1);
      if (!stage) throw new Error(`Dockerfile line ${ins.line}: ${ins.op} before FROM`);
      stage.steps.push(ins);
    }
  }
  return stages;
}

/** JSON exec form (`["a", "b"]`) or shell form split on spaces. */
export function execForm(args: string): string[] {
  return args.startsWith('[') ? (JSON.parse(args) as string[]) : args.split(/\s+/);
}

/** The Debian packages an `apt-get install` RUN line names, or null for other RUN lines. */
export function aptPackages(command: string): string[] | null {
  if (!/\bapt-get\b/.test(command)) return null;
  const install = /\bapt-get\s+install\s+(.*?)(?:&&|;|$)/.exec(command);
  return install ? (install[1] as string).split(/\s+/).filter((w) => w !== '' && !w.startsWith('-')) : [];
}

/** A .dockerignore pattern as a regex on context-relative paths (`*` within a segment, `**` across). */
function ignoreRegex(pattern: string): RegExp {
  const p = posix.normalize(pattern.replace(/^\/+/, ''));
  if (/[?[\]!]/.test(p))
    throw new Error(`.dockerignore: the pattern ${pattern} uses syntax this script does not read`);
  const body = p
    .split('/')
    .map((seg) => (seg === '**' ? '.*' : seg.replace(/[.+^$()|{}]/g, '\\$&').replaceAll('*', '[^/]*')))
    .join('/');
  return new RegExp(`^${body}(/.*)?$`);
}

export function dockerIgnore(text: string): (rel: string) => boolean {
  const patterns = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map(ignoreRegex);
  return (rel) => patterns.some((re) => re.test(rel));
}

interface Run {
  tmp: string;
  context: string;
  ignored: (rel: string) => boolean;
  /** Stage name → the directory standing for its filesystem root. */
  roots: Map<string, string>;
  log: Array<{ stage: string; step: string; result: string; seconds: number }>;
}

/** A container path inside a stage's root. */
function inRoot(root: string, cwd: string, path: string): string {
  return isAbsolute(path) ? join(root, path) : resolve(cwd, path);
}

function copy(run: Run, stage: string, cwd: string, args: string): void {
  const words = execForm(args);
  const from = words[0]?.startsWith('--from=') ? (words.shift() as string).slice('--from='.length) : null;
  const dest = words.pop() as string;
  const srcRoot = from === null ? run.context : run.roots.get(from);
  if (!srcRoot) throw new Error(`COPY --from=${from}: no such stage before ${stage}`);
  const root = run.roots.get(stage) as string;
  const target = inRoot(root, cwd, dest);
  for (const src of words) {
    const abs = from === null ? resolve(run.context, src) : join(srcRoot, src);
    if (!existsSync(abs))
      throw new Error(`COPY ${src}: not in ${from === null ? 'the context' : `stage ${from}`}`);
    const to = words.length > 1 || dest.endsWith('/') ? join(target, basename(abs)) : target;
    mkdirSync(dirname(to), { recursive: true });
    cpSync(abs, to, {
      recursive: true,
      filter: (p) => from !== null || !run.ignored(relative(run.context, p).split(sep).join('/')),
    });
  }
}

function sh(command: string, cwd: string, env: NodeJS.ProcessEnv): void {
  const r = spawnSync('sh', ['-c', command], { cwd, env, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`RUN ${command}: exit ${r.status ?? r.signal}`);
}

function runStage(run: Run, stage: Stage): { cwd: string; env: NodeJS.ProcessEnv; entrypoint: string[] } {
  const root = join(run.tmp, `stage-${stage.name}`);
  mkdirSync(root, { recursive: true });
  run.roots.set(stage.name, root);
  let cwd = root;
  const env: NodeJS.ProcessEnv = { ...process.env };
  let entrypoint: string[] = [];
  for (const step of stage.steps) {
    const t0 = Date.now();
    let result = 'done';
    if (step.op === 'WORKDIR') {
      cwd = inRoot(root, cwd, step.args);
      mkdirSync(cwd, { recursive: true });
    } else if (step.op === 'COPY') {
      copy(run, stage.name, cwd, step.args);
    } else if (step.op === 'ENV') {
      for (const m of step.args.matchAll(/(\w+)=("[^"]*"|\S+)/g))
        env[m[1] as string] = (m[2] as string).replace(/^"|"$/g, '');
    } else if (step.op === 'RUN') {
      const packages = aptPackages(step.args);
      if (packages === null) sh(step.args, cwd, env);
      else {
        const missing = packages.filter(
          (p) => spawnSync('dpkg', ['-s', p], { stdio: 'ignore' }).status !== 0,
        );
        if (missing.length > 0)
          throw new Error(`RUN apt-get: install ${missing.join(' ')} on this machine first`);
        result = `not run; installed here: ${packages.join(' ')}`;
      }
    } else if (step.op === 'ENTRYPOINT') {
      entrypoint = execForm(step.args).map((a) => (a.startsWith('/') ? join(root, a) : a));
      result = 'recorded';
    } else {
      result = 'not applicable outside a container';
    }
    const seconds = (Date.now() - t0) / 1000;
    run.log.push({ stage: stage.name, step: `${step.op} ${step.args}`.slice(0, 100), result, seconds });
    console.log(
      `[${stage.name}] ${step.op} ${step.args.slice(0, 90)} -> ${result} (${seconds.toFixed(1)} s)`,
    );
  }
  return { cwd, env, entrypoint };
}

function waitForLine(child: ChildProcess, re: RegExp, timeoutMs: number): Promise<RegExpExecArray> {
  return new Promise((resolvePromise, reject) => {
    let seen = '';
    const timer = setTimeout(
      () => reject(new Error(`no ${re} within ${timeoutMs} ms; output: ${seen}`)),
      timeoutMs,
    );
    const onData = (b: Buffer): void => {
      seen += b.toString();
      const m = re.exec(seen);
      if (m) {
        clearTimeout(timer);
        resolvePromise(m);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code} before ${re}; output: ${seen}`));
    });
  });
}

async function smoke(final: {
  cwd: string;
  env: NodeJS.ProcessEnv;
  entrypoint: string[];
}): Promise<Record<string, unknown>> {
  const [cmd, ...pre] = final.entrypoint;
  if (!cmd) throw new Error('the final stage has no ENTRYPOINT');
  const help = spawnSync(cmd, [...pre, '--help'], { cwd: final.cwd, env: final.env, encoding: 'utf8' });
  if (help.status !== 0 || !/\bserve\b/.test(help.stdout) || !/\bproxy\b/.test(help.stdout)) {
    throw new Error(`kvconnect --help: exit ${help.status}\n${help.stdout}${help.stderr}`);
  }
  console.log('[smoke] kvconnect --help lists serve and proxy');
  const started: ChildProcess[] = [];
  const start = async (args: string[], re: RegExp): Promise<string> => {
    // The image sets no log level: the servers log at info, as they would in a pod.
    const { KVCONNECT_LOG_LEVEL: _, ...env } = final.env;
    const child = spawn(cmd, [...pre, ...args], {
      cwd: final.cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    started.push(child);
    return (await waitForLine(child, re, 120_000))[1] as string;
  };
  const complete = async (url: string): Promise<string> => {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'kjv-llama', prompt: 'In the beginning', max_tokens: 8, temperature: 0 }),
    });
    const body = (await res.json()) as {
      choices?: Array<{ text?: string }>;
      usage?: { completion_tokens?: number };
    };
    const text = body.choices?.[0]?.text ?? '';
    if (res.status !== 200 || body.usage?.completion_tokens !== 8 || text === '') {
      throw new Error(`POST ${url}/v1/completions: ${res.status} ${JSON.stringify(body)}`);
    }
    return text;
  };
  try {
    const server = await start(
      ['serve', '--model', 'kjv-llama', '--host', '127.0.0.1', '--port', '0'],
      /listening on (http:\/\/\S+)/,
    );
    const health = await fetch(`${server}/health`);
    if (health.status !== 200) throw new Error(`GET /health: ${health.status}`);
    const direct = await complete(server);
    console.log(`[smoke] serve on ${server}: /health 200, completion ${JSON.stringify(direct)}`);
    const proxy = await start(
      ['proxy', '--port', '0', '--decode', server],
      /proxy listening on (http:\/\/\S+)/,
    );
    const proxied = await complete(proxy);
    if (proxied !== direct)
      throw new Error(`through the proxy: ${JSON.stringify(proxied)}, direct: ${JSON.stringify(direct)}`);
    console.log(`[smoke] proxy on ${proxy} in front of it: the same greedy completion`);
    return { server, proxy, completion: direct };
  } finally {
    for (const child of started.reverse()) {
      if (child.exitCode !== null) continue;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const refAt = argv.indexOf('--ref');
  const ref = refAt >= 0 ? (argv[refAt + 1] ?? 'HEAD') : 'HEAD';
  const keep = argv.includes('--keep');
  const commit = spawnSync('git', ['rev-parse', ref], { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  if (!commit) throw new Error(`git rev-parse ${ref} failed`);
  const tmp = mkdtempSync(join(tmpdir(), 'kvconnect-docker-steps-'));
  const t0 = Date.now();
  let ok = false;
  let failure: string | null = null;
  let smokeResult: Record<string, unknown> = {};
  const run: Run = { tmp, context: join(tmp, 'context'), ignored: () => false, roots: new Map(), log: [] };
  try {
    const clone = spawnSync('git', ['clone', '--quiet', '--no-checkout', ROOT, run.context], {
      stdio: 'inherit',
    });
    const checkout = spawnSync('git', ['-C', run.context, 'checkout', '--quiet', commit], {
      stdio: 'inherit',
    });
    if (clone.status !== 0 || checkout.status !== 0) throw new Error('git clone/checkout failed');
    console.log(`context: a clean clone of ${commit} in ${run.context}`);
    const ignoreFile = join(run.context, '.dockerignore');
    if (existsSync(ignoreFile) && statSync(ignoreFile).isFile())
      run.ignored = dockerIgnore(readFileSync(ignoreFile, 'utf8'));
    const stages = parseDockerfile(readFileSync(join(run.context, 'Dockerfile'), 'utf8'));
    const node = process.versions.node.split('.')[0];
    for (const stage of stages) {
      if (!new RegExp(`^node:${node}[.-]`).test(stage.base)) {
        throw new Error(
          `stage ${stage.name} is FROM ${stage.base}, but this script runs on Node ${process.versions.node}`,
        );
      }
    }
    let final: ReturnType<typeof runStage> | null = null;
    for (const stage of stages) final = runStage(run, stage);
    if (final) smokeResult = await smoke(final);
    ok = true;
  } catch (e) {
    failure = e instanceof Error ? e.message : String(e);
    console.error(`docker-steps: ${failure}`);
  } finally {
    if (!keep) rmSync(tmp, { recursive: true, force: true });
  }
  const result = {
    ok,
    commit,
    node: process.versions.node,
    seconds: (Date.now() - t0) / 1000,
    steps: run.log,
    smoke: smokeResult,
    failure,
    kept: keep ? tmp : null,
  };
  console.log(JSON.stringify(result));
  process.exitCode = ok ? 0 : 1;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
