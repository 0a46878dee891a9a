/**
 * Checks a Prometheus text scrape the way an operator's tools read it: `promtool check
 * metrics` (Debian `prometheus`) must parse it, and our own reading of the text finds
 * every family declared once, every series once, counters ending in `_total`.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  types: Map<string, string>;
  helps: Map<string, string>;
  samples: Sample[];
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Parses the text format, failing on a repeated HELP/TYPE or a repeated series. */
export function parseExposition(text: string): Exposition {
  const out: Exposition = { types: new Map(), helps: new Map(), samples: [] };
  const seen = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
    if (meta) {
      const map = meta[1] === 'TYPE' ? out.types : out.helps;
      assert.ok(!map.has(meta[2]!), `${meta[1]} of ${meta[2]} appears twice`);
      map.set(meta[2]!, meta[3] ?? '');
      continue;
    }
    const m = SAMPLE.exec(line);
    assert.ok(m, `unparsable line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!;
    const key = `${m[1]}{${Object.keys(labels)
      .sort()
      .map((k) => `${k}=${labels[k]}`)
      .join(',')}}`;
    assert.ok(!seen.has(key), `duplicate series ${key}`);
    seen.add(key);
    out.samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The family a sample belongs to (histogram samples end in _bucket/_sum/_count). */
export function familyOf(exp: Exposition, sampleName: string): string | undefined {
  if (exp.types.has(sampleName)) return sampleName;
  const base = sampleName.replace(/_(bucket|sum|count)$/, '');
  const type = exp.types.get(base);
  return type === 'histogram' || type === 'summary' ? base : undefined;
}

/** Sum of the samples named `name` whose labels include `labels`. */
export function sampleValue(exp: Exposition, name: string, labels: Record<string, string> = {}): number {
  const hits = exp.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  assert.ok(hits.length > 0, `no sample ${name} ${JSON.stringify(labels)}`);
  return hits.reduce((a, s) => a + s.value, 0);
}

/**
 * promtool's lint findings that a vLLM scrape has too: vLLM names use `:`, and
 * `vllm:iteration_tokens_total` is a histogram whose name ends in `_total`.
 */
const VLLM_LINT = [
  /^\S+ metric names should not contain ':'$/,
  /^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$/,
];

export type PromtoolResult = { available: false } | { available: true; code: number | null; output: string };

export function promtoolCheck(text: string): Promise<PromtoolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (b: Buffer) => {
      output += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      output += b.toString();
    });
    child.on('error', (e: NodeJS.ErrnoException) =>
      e.code === 'ENOENT' ? resolve({ available: false }) : reject(e),
    );
    child.on('close', (code) => resolve({ available: true, code, output }));
    child.stdin.end(text);
  });
}

/** promtool parses the text; its only findings are the ones a vLLM scrape also has. */
export async function assertPromtoolAccepts(text: string, t: { skip(msg: string): void }): Promise<void> {
  const result = await promtoolCheck(text);
  if (!result.available) {
    assert.ok(
      process.env['KVCONNECT_EXPECT_PROMTOOL'] !== '1',
      'promtool is missing but KVCONNECT_EXPECT_PROMTOOL=1 (install Debian package prometheus)',
    );
    t.skip('promtool not installed (Debian package prometheus); only the built-in checks ran');
    return;
  }
  assert.ok(!/error while linting|parsing error/i.test(result.output), result.output);
  assert.notEqual(result.code, 1, result.output);
  const findings = result.output.split('\n').filter((l) => l.trim() !== '');
  const unexpected = findings.filter((f) => !VLLM_LINT.some((re) => re.test(f.trim())));
  assert.deepEqual(unexpected, [], `promtool findings a vLLM scrape does not have:\n${result.output}`);
}

/**
 * Counters end in _total; every vllm:* sample carries model_name and engine (the HTTP
 * instrumentator's http_* families carry their own labels, as on vLLM).
 */
export function assertVllmShape(exp: Exposition, modelName: string): void {
  for (const [name, type] of exp.types) {
    if (type === 'counter') assert.match(name, /_total$/, `counter ${name} lacks the _total suffix`);
  }
  for (const s of exp.samples) {
    const family = familyOf(exp, s.name);
    assert.ok(family, `sample ${s.name} has no TYPE line`);
    // vLLM's one vllm:* family without model_name / engine labels.
    if (!s.name.startsWith('vllm:') || s.name === 'vllm:lora_requests_info') continue;
    assert.equal(s.labels['model_name'] ?? modelName, modelName, `${s.name} model_name`);
    assert.equal(s.labels['engine'], '0', `${s.name} has engine="0"`);
  }
}
