/**
 * deploy/*.yaml as far as they can be checked without a cluster: every document parses and has
 * the shape Kubernetes requires; every kvconnect container's command line (the image's
 * ENTRYPOINT + args) passes the CLI's own start-up checks (`serve --dry-run`, `proxy --dry-run`,
 * in-process, with the env the downward API would give); Services and probes name ports the
 * selected pods declare; HTTP probes name routes a real `kvconnect serve` and `kvconnect proxy`
 * answer 200; proxies name backends the same file defines; and llm-d's routing sidecar gets only
 * flags it defines, pointed at the kvconnect server of its pod.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { parseDockerfile } from '../../scripts/docker-steps.ts';
import { runCli } from '../../src/cli/program.ts';
import type { AsyncEngineLike } from '../../src/engine/api.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { type Running, startEngine, startServer } from '../server/helpers/harness.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const IMAGE = `kvconnect:${VERSION}`;
/** What the downward API would give the pod in these checks. */
const POD = { 'status.podIP': '10.244.1.7', 'metadata.name': 'pod-0', 'metadata.namespace': 'default' };

/**
 * llm-d's routing sidecar flags (llm-d/llm-d-router pkg/sidecar/proxy/options.go, with the
 * controller-runtime zap logging flags it binds); null: any value.
 */
const SIDECAR_FLAGS: Record<string, readonly string[] | null> = {
  port: null,
  'model-server-port': null,
  'vllm-port': null,
  'data-parallel-size': null,
  'kv-connector': ['nixlv2', 'shared-storage', 'sglang', 'mooncake', 'offloading'],
  'ec-connector': null,
  'mooncake-bootstrap-port': null,
  'p2p-connector-port': null,
  'enable-p2p-pull': ['true', 'false'],
  'enable-ssrf-protection': ['true', 'false'],
  'enable-prefiller-sampling': ['true', 'false'],
  'enable-speculative-prefill': ['true', 'false'],
  'secure-serving': ['true', 'false'],
  'secure-proxy': ['true', 'false'],
  'cert-path': null,
  'inference-pool': null,
  'pool-group': null,
  'max-idle-conns-per-host': null,
  'prefill-max-retries': null,
  'prefill-retry-backoff': null,
  'decode-chunk-size': null,
  tracing: ['true', 'false'],
  'metrics-port': null,
  'zap-devel': ['true', 'false'],
  'zap-encoder': ['json', 'console'],
  'zap-log-level': null,
  'zap-stacktrace-level': null,
  'zap-time-encoding': null,
};
const SIDECAR_IMAGE = /^ghcr\.io\/llm-d\/llm-d-(router-disagg|routing)-sidecar:/;

type Obj = Record<string, unknown>;
interface Port {
  name?: string;
  containerPort: number;
  protocol?: string;
}
interface Probe {
  httpGet?: { path: string; port: number | string };
  tcpSocket?: { port: number | string };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  args?: unknown[];
  restartPolicy?: string;
  env?: Array<{ name: string; value?: unknown; valueFrom?: { fieldRef?: { fieldPath: string } } }>;
  ports?: Port[];
  startupProbe?: Probe;
  livenessProbe?: Probe;
  readinessProbe?: Probe;
}
interface Workload {
  file: string;
  kind: string;
  name: string;
  labels: Record<string, string>;
  replicas: number;
  serviceName?: string;
  /** Containers and native sidecars (init containers with restartPolicy Always). */
  containers: Container[];
}
interface Service {
  file: string;
  name: string;
  headless: boolean;
  selector: Record<string, string>;
  ports: Array<{ name?: string; port: number; targetPort?: number | string }>;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const files = readdirSync(DEPLOY)
  .filter((f) => f.endsWith('.yaml'))
  .sort();
const workloads: Workload[] = [];
const services: Service[] = [];
const problems: string[] = [];

for (const file of files) {
  for (const [i, doc] of parseAllDocuments(readFileSync(join(DEPLOY, file), 'utf8')).entries()) {
    const where = `${file} document ${i + 1}`;
    for (const e of [...doc.errors, ...doc.warnings]) problems.push(`${where}: ${e.message}`);
    const o = doc.toJS() as Obj | null;
    if (o === null) continue;
    const meta = o['metadata'] as { name?: string } | undefined;
    if (typeof o['apiVersion'] !== 'string' || typeof o['kind'] !== 'string' || !meta?.name) {
      problems.push(`${where}: apiVersion, kind and metadata.name are required`);
      continue;
    }
    if (!DNS_LABEL.test(meta.name)) problems.push(`${where}: ${meta.name} is not a DNS-1123 label`);
    const spec = o['spec'] as Obj;
    if (o['kind'] === 'Service') {
      assert.equal(o['apiVersion'], 'v1', where);
      services.push({
        file,
        name: meta.name,
        headless: spec['clusterIP'] === 'None',
        selector: spec['selector'] as Record<string, string>,
        ports: spec['ports'] as Service['ports'],
      });
    } else if (o['kind'] === 'Deployment' || o['kind'] === 'StatefulSet') {
      assert.equal(o['apiVersion'], 'apps/v1', where);
      const template = spec['template'] as { metadata: { labels: Record<string, string> }; spec: Obj };
      const matchLabels = (spec['selector'] as { matchLabels: Record<string, string> }).matchLabels;
      for (const [k, v] of Object.entries(matchLabels)) {
        if (template.metadata.labels[k] !== v)
          problems.push(`${where}: selector ${k}=${v} not in the template's labels`);
      }
      const init = ((template.spec['initContainers'] ?? []) as Container[]).filter(
        (c) => c.restartPolicy === 'Always',
      );
      workloads.push({
        file,
        kind: o['kind'] as string,
        name: meta.name,
        labels: template.metadata.labels,
        replicas: spec['replicas'] as number,
        ...(typeof spec['serviceName'] === 'string' ? { serviceName: spec['serviceName'] } : {}),
        containers: [...init, ...(template.spec['containers'] as Container[])],
      });
    } else {
      problems.push(`${where}: unexpected kind ${o['kind']}`);
    }
  }
}

const all = (): Array<{ w: Workload; c: Container }> =>
  workloads.flatMap((w) => w.containers.map((c) => ({ w, c })));
const ours = () => all().filter(({ c }) => c.image.startsWith('kvconnect:'));
const sidecars = () => all().filter(({ c }) => SIDECAR_IMAGE.test(c.image));

function findPort(c: Container, port: number | string): Port | undefined {
  return c.ports?.find((p) => (typeof port === 'number' ? p.containerPort === port : p.name === port));
}

function flagValue(args: readonly string[], flag: string): string | undefined {
  const at = args.indexOf(flag);
  return at >= 0 ? args[at + 1] : undefined;
}

function selects(s: Service, w: Workload): boolean {
  return Object.entries(s.selector).every(([k, v]) => w.labels[k] === v);
}

/** The env the pod would have: literal values and the downward API's fields. */
function podEnv(c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    const path = e.valueFrom?.fieldRef?.fieldPath;
    if (path !== undefined) {
      assert.ok(
        Object.hasOwn(POD, path),
        `${c.name}: env ${e.name} from ${path}, a field these checks do not know`,
      );
      env[e.name] = POD[path as keyof typeof POD];
    } else {
      assert.equal(typeof e.value, 'string', `${c.name}: env ${e.name} must be a string (quote numbers)`);
      env[e.name] = e.value as string;
    }
  }
  return env;
}

async function withEnv<T>(env: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

test('every manifest parses, and each document has the shape Kubernetes requires', () => {
  assert.deepEqual(files, ['kv-events.yaml', 'pd-proxy.yaml', 'pd-sidecar.yaml', 'single.yaml']);
  assert.deepEqual(problems, []);
  assert.ok(
    workloads.length >= 7 && services.length >= 7,
    `${workloads.length} workloads, ${services.length} services`,
  );
  for (const { w, c } of all()) {
    const where = `${w.file} ${w.name}/${c.name}`;
    assert.ok(DNS_LABEL.test(c.name), where);
    assert.ok(typeof c.image === 'string' && c.image !== '', `${where}: image`);
    assert.ok(Array.isArray(c.args) && c.args.length > 0, `${where}: args`);
    for (const a of c.args ?? [])
      assert.equal(typeof a, 'string', `${where}: argument ${String(a)} must be a string`);
    const names = (c.ports ?? []).map((p) => p.name).filter((n) => n !== undefined);
    assert.equal(new Set(names).size, names.length, `${where}: port names are unique`);
    for (const p of c.ports ?? []) {
      assert.ok(Number.isInteger(p.containerPort) && p.containerPort > 0 && p.containerPort < 65536, where);
      if (p.name !== undefined) assert.match(p.name, /^[a-z0-9-]{1,15}$/, `${where}: port name ${p.name}`);
    }
  }
  for (const w of workloads.filter((x) => x.kind === 'StatefulSet')) {
    const governing = services.find((s) => s.name === w.serviceName && s.file === w.file);
    assert.ok(
      governing?.headless,
      `${w.name}: serviceName ${w.serviceName} is a headless Service in ${w.file}`,
    );
  }
});

test("every Service selects a workload of its file and targets a port that workload's pods declare", () => {
  for (const s of services) {
    const selected = workloads.filter((w) => w.file === s.file && selects(s, w));
    assert.ok(selected.length > 0, `${s.file} ${s.name}: selects no workload`);
    for (const w of selected) {
      for (const p of s.ports) {
        const target = p.targetPort ?? p.port;
        assert.ok(
          w.containers.some((c) => findPort(c, target)),
          `${s.file} ${s.name}: targetPort ${target} is not a port of ${w.name}`,
        );
      }
    }
  }
});

test('every kvconnect container runs the image this repo builds, with a command line the CLI accepts', async () => {
  const stages = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
  const entrypoint = stages.at(-1)?.steps.find((s) => s.op === 'ENTRYPOINT');
  assert.deepEqual(JSON.parse(entrypoint?.args ?? 'null'), ['node', '/app/dist/cli/main.js']);
  const commands = new Set<string>();
  for (const { w, c } of ours()) {
    const where = `${w.file} ${w.name}/${c.name}`;
    assert.equal(c.image, IMAGE, `${where}: the image tag is the package version`);
    assert.equal(c.command, undefined, `${where}: the image's ENTRYPOINT (kvconnect) runs`);
    const args = c.args as string[];
    const command = args[0] as string;
    assert.ok(command === 'serve' || command === 'proxy', `${where}: runs serve or proxy, not ${command}`);
    commands.add(command);
    let out = '';
    let err = '';
    const env = podEnv(c);
    const code = await withEnv(env, () =>
      runCli([...args, '--dry-run'], {
        out: (t) => {
          out += t;
        },
        err: (t) => {
          err += t;
        },
      }),
    );
    assert.equal(code, 0, `${where}: kvconnect ${args.join(' ')} --dry-run failed:\n${err}`);
    // Reachable from other pods: every address, on a port the container declares.
    const listen = /on 0\.0\.0\.0:(\d+)/.exec(out);
    assert.ok(listen, `${where}: listens on 0.0.0.0 (${out})`);
    assert.ok(findPort(c, Number(listen[1])), `${where}: port ${listen[1]} is declared`);
    if (command === 'serve') {
      const events = flagValue(args, '--kv-events-config');
      if (events !== undefined && (JSON.parse(events) as Obj)['enable_kv_cache_events'] === true) {
        // llm-d's topic from POD_IP, on the serving port, for the served model.
        const topic = `kv@${env['POD_IP']}:${flagValue(args, '--port')}@${flagValue(args, '--model')}`;
        assert.ok(env['POD_IP'], `${where}: POD_IP from the downward API`);
        assert.match(out, new RegExp(`topic ${topic.replaceAll('.', '\\.')}(,|\n)`), `${where}: ${out}`);
        const endpoint = /"endpoint":"tcp:\/\/\*:(\d+)"/.exec(events);
        assert.ok(endpoint && findPort(c, Number(endpoint[1])), `${where}: the KV events port is declared`);
      }
      if (flagValue(args, '--kv-transfer-config')?.includes('NixlConnector')) {
        assert.equal(
          env['VLLM_NIXL_SIDE_CHANNEL_HOST'],
          POD['status.podIP'],
          `${where}: side channel on the pod IP`,
        );
        assert.ok(
          findPort(c, Number(env['VLLM_NIXL_SIDE_CHANNEL_PORT'])),
          `${where}: side-channel port declared`,
        );
      }
    }
  }
  assert.deepEqual([...commands].sort(), ['proxy', 'serve']);
});

test("a proxy's backends are Services (or a StatefulSet's pods) of its file, on ports they serve", () => {
  const proxies = ours().filter(({ c }) => (c.args as string[])[0] === 'proxy');
  assert.ok(proxies.length >= 2);
  for (const { w, c } of proxies) {
    const args = c.args as string[];
    const urls = args.flatMap((a, i) =>
      a === '--prefill' || a === '--decode' ? [args[i + 1] as string] : [],
    );
    assert.ok(urls.length > 0, `${w.name}: names its backends`);
    for (const raw of urls) {
      const url = new URL(raw);
      const [first, second] = url.hostname.split('.');
      const svc = services.find((s) => s.file === w.file && s.name === (second ?? first));
      assert.ok(svc, `${w.file} ${w.name}: ${raw} names no Service of the file`);
      if (second !== undefined) {
        const set = workloads.find((x) => x.kind === 'StatefulSet' && x.serviceName === svc.name);
        const replica = Number((first as string).slice(`${set?.name}-`.length));
        assert.ok(
          set && (first as string).startsWith(`${set.name}-`),
          `${raw}: a pod of StatefulSet ${svc.name}`,
        );
        assert.ok(
          Number.isInteger(replica) && replica >= 0 && replica < set.replicas,
          `${raw}: replica ${replica} of ${set.replicas}`,
        );
      }
      assert.ok(
        svc.ports.some((p) => p.port === Number(url.port)),
        `${raw}: port ${url.port} is a port of Service ${svc.name}`,
      );
    }
  }
});

test("llm-d's routing sidecar gets only its own flags, in front of its pod's kvconnect server", () => {
  const found = sidecars();
  assert.equal(found.length, 1);
  for (const { w, c } of found) {
    const where = `${w.file} ${w.name}/${c.name}`;
    assert.equal(c.restartPolicy, 'Always', `${where}: a native sidecar`);
    const flags: Record<string, string> = {};
    for (const a of c.args as string[]) {
      const m = /^--([a-z0-9-]+)=(.*)$/.exec(a);
      assert.ok(m, `${where}: ${a} is --flag=value`);
      const [, name, value] = m as unknown as [string, string, string];
      assert.ok(Object.hasOwn(SIDECAR_FLAGS, name), `${where}: --${name} is not a flag of the sidecar`);
      const allowed = SIDECAR_FLAGS[name];
      if (allowed)
        assert.ok(allowed.includes(value), `${where}: --${name}=${value}, expected one of ${allowed}`);
      flags[name] = value;
    }
    assert.equal(flags['kv-connector'], 'nixlv2', `${where}: the NIXL v2 protocol`);
    assert.ok(findPort(c, Number(flags['port'])), `${where}: --port is its declared port`);
    const server = w.containers.find((x) => x.image === IMAGE);
    assert.ok(server, `${where}: a kvconnect server in the same pod`);
    const serverArgs = server.args as string[];
    assert.equal(flags['model-server-port'] ?? flags['vllm-port'], flagValue(serverArgs, '--port'));
    assert.match(flagValue(serverArgs, '--kv-transfer-config') ?? '', /"kv_connector":"NixlConnector"/);
    assert.match(flagValue(serverArgs, '--kv-transfer-config') ?? '', /"kv_role":"kv_consumer"/);
  }
});

let engine: AsyncEngineLike;
let server: Running;
let proxy: RunningProxy;

before(async () => {
  engine = await startEngine();
  server = await startServer({ engine });
  proxy = await startProxy(resolveProxyOptions({ decode: [server.url], port: 0, host: '127.0.0.1' }));
});

after(async () => {
  await proxy?.close();
  await server?.close();
  await engine?.shutdown();
});

test('every probe names a declared port, and HTTP probes a route the real server or proxy answers 200', async () => {
  let checked = 0;
  for (const { w, c } of all()) {
    for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe'] as const) {
      const probe = c[kind];
      if (!probe) continue;
      const where = `${w.file} ${w.name}/${c.name} ${kind}`;
      const port = probe.httpGet?.port ?? probe.tcpSocket?.port;
      assert.ok(port !== undefined && findPort(c, port), `${where}: port ${port} is declared`);
      if (!probe.httpGet) continue;
      const command = (c.args as string[])[0];
      assert.ok(c.image === IMAGE, `${where}: HTTP probes only on kvconnect containers here`);
      const base = command === 'proxy' ? proxy.url : server.url;
      const res = await fetch(`${base}${probe.httpGet.path}`);
      await res.arrayBuffer();
      assert.equal(res.status, 200, `${where}: GET ${probe.httpGet.path} on kvconnect ${command}`);
      checked++;
    }
  }
  assert.ok(checked >= 10, `${checked} HTTP probes`);
  // Every server pod is probed for liveness and readiness.
  for (const { w, c } of ours()) {
    assert.ok(c.livenessProbe && c.readinessProbe, `${w.name}/${c.name}: liveness and readiness probes`);
  }
});
