/**
 * The demo's workload: a few families of prompts, each family sharing one long prefix (a
 * "document") and ending in its own question, so prefix caching and KV transfer both matter.
 * Deterministic: the same options give the same prompts on every machine.
 */

export interface DemoRequest {
  /** Position in the workload (also the X-Request-Id suffix). */
  index: number;
  family: number;
  prompt: string;
  maxTokens: number;
}

const TOPICS = [
  'harbour logistics',
  'alpine weather',
  'orchard planning',
  'library archives',
  'river surveys',
];
const WORDS = [
  'the',
  'cache',
  'block',
  'token',
  'prefix',
  'engine',
  'decode',
  'prefill',
  'transfer',
  'layer',
  'record',
  'ledger',
  'north',
  'signal',
  'window',
  'value',
  'batch',
  'queue',
  'stream',
  'memory',
  'report',
  'season',
  'measure',
  'bridge',
  'station',
  'harvest',
  'index',
  'summary',
  'draft',
  'note',
];
const QUESTIONS = [
  'What is the first point?',
  'Summarise the second paragraph.',
  'Which word appears most often?',
  'List three facts from the text.',
  'Rewrite the opening sentence.',
  'What should happen next?',
  'Give a short title.',
  'Explain the last line.',
];

/** xorshift32: tiny, seedable, identical everywhere. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
}

/** A document of exactly `length` characters (ASCII, so bytes = characters = tokens). */
export function familyPrefix(family: number, length: number): string {
  const next = rng(0x9e3779b9 ^ (family * 2654435761));
  const topic = TOPICS[family % TOPICS.length] ?? 'notes';
  let text = `Document ${family + 1} on ${topic}.`;
  while (text.length < length) text += ` ${WORDS[next() % WORDS.length]}`;
  return `${text.slice(0, Math.max(0, length - 1))}\n`;
}

export interface WorkloadShape {
  requests: number;
  families: number;
  prefixLength: number;
  maxTokens: number;
}

/** Requests interleave the families: 0,1,2,3,0,1,... so every family recurs. */
export function buildWorkload(shape: WorkloadShape): DemoRequest[] {
  const families = Math.max(1, Math.min(shape.families, shape.requests));
  const prefixes = Array.from({ length: families }, (_, f) => familyPrefix(f, shape.prefixLength));
  return Array.from({ length: shape.requests }, (_, index) => {
    const family = index % families;
    const round = Math.floor(index / families);
    const question = QUESTIONS[(round + family) % QUESTIONS.length] ?? '';
    return {
      index,
      family,
      prompt: `${prefixes[family]}Question ${round + 1}: ${question}\nAnswer:`,
      maxTokens: shape.maxTokens,
    };
  });
}

/**
 * Sending order: each family's first request alone (it fills the prefix cache), then the
 * rest in waves of `concurrency` concurrent requests.
 */
export function workloadWaves(requests: readonly DemoRequest[], concurrency: number): DemoRequest[][] {
  const seen = new Set<number>();
  const firsts: DemoRequest[] = [];
  const rest: DemoRequest[] = [];
  for (const r of requests) {
    if (seen.has(r.family)) rest.push(r);
    else {
      seen.add(r.family);
      firsts.push(r);
    }
  }
  const waves = firsts.map((r) => [r]);
  const width = Math.max(1, concurrency);
  for (let i = 0; i < rest.length; i += width) waves.push(rest.slice(i, i + width));
  return waves;
}
