/**
 * The demo's workload: a few families of prompts, each family sharing one long prefix (a
 * "document") and ending in its own opening words, so prefix caching and KV transfer both matter.
 * Deterministic: the same options give the same prompts on every machine.
 */

export interface DemoRequest {
  /** Position in the workload (also the X-Request-Id suffix). */
  index: number;
  family: number;
  prompt: string;
  maxTokens: number;
}

// Sentences in the style of the default model's corpus (the King James Bible), written for
// the demo, so its completions are readable English: each family's "document" is a
// shuffled run of them, each request ends in its own opening words for the model to finish.
const OPENINGS = [
  'Now it came to pass in the days of the judges, that there was a famine in the land.',
  'And a certain man went forth out of the city toward the river, and his servants with him.',
];
const SENTENCES = [
  'And the people gathered together in the morning, and went up unto the house of the elders.',
  'And they brought their sheep and their oxen, and set them before the gate of the city.',
  'Then the king commanded his servants, saying, Go ye and number the people.',
  'And the women sat by the well, and drew water for the flocks of their fathers.',
  'And it was so, that the rain ceased, and the rivers were dried up in the valley.',
  'And the children of the land went forth to gather bread, and they found none.',
  'Then spake the elder unto the young men, saying, Be not afraid, for the day is near.',
  'And the watchmen stood upon the wall, and cried with a loud voice unto the city.',
  'And the merchants came from afar with gold and silver and fine linen.',
  'And they builded an altar upon the hill, and offered bread and wine thereon.',
  'And the messenger ran before the chariots, and came unto the gate at evening.',
  'And all the congregation lifted up their voice, and wept that night.',
];
const CUES = [
  'And the LORD said unto',
  'Then answered the king, and said,',
  'And it came to pass, when',
  'Behold, I will',
  'And the people said,',
  'Blessed are they that',
  'And he went out from',
  'Hear now, O ye',
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

/**
 * A document of about `length` characters (ASCII; one byte-tokenizer token per character,
 * about four characters per token with the default model's BPE), ending at a sentence.
 */
export function familyPrefix(family: number, length: number): string {
  const next = rng(0x9e3779b9 ^ (family * 2654435761));
  let text = OPENINGS[family % OPENINGS.length] ?? '';
  while (text.length < length) text += `\n${SENTENCES[next() % SENTENCES.length]}`;
  return `${text}\n`;
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
    const cue = CUES[(round + family) % CUES.length] ?? '';
    return {
      index,
      family,
      prompt: `${prefixes[family]}${cue}`,
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
