/**
 * A few outputs shown in full, so a person can judge them: each prompt's end, then the
 * disaggregated completion beside the plain one and whether their token ids are equal.
 */
import type { CompletionResult } from './client.ts';
import type { DemoRequest } from './workload.ts';

export interface DemoSample {
  index: number;
  prompt: string;
  disaggregated: string;
  plain: string;
  /** Token ids (not text) compared: different tokens can decode to the same text. */
  same_token_ids: boolean;
}

/** The first request of up to `count` families. */
export function pickSamples(
  requests: readonly DemoRequest[],
  disaggregated: readonly CompletionResult[],
  plain: readonly CompletionResult[],
  count = 3,
): DemoSample[] {
  const families = new Set<number>();
  const samples: DemoSample[] = [];
  for (const r of requests) {
    if (samples.length >= count) break;
    if (families.has(r.family)) continue;
    families.add(r.family);
    const d = disaggregated.find((x) => x.index === r.index);
    const p = plain.find((x) => x.index === r.index);
    if (d === undefined || p === undefined) continue;
    samples.push({
      index: r.index,
      prompt: r.prompt,
      disaggregated: d.text,
      plain: p.text,
      same_token_ids:
        d.tokenIds.length === p.tokenIds.length && d.tokenIds.every((t, i) => t === p.tokenIds[i]),
    });
  }
  return samples;
}

const oneLine = (text: string): string => text.replaceAll('\n', ' ⏎ ');

/** The samples as text (no trailing newline): the prompt's last two lines, then both completions. */
export function renderSamples(samples: readonly DemoSample[]): string {
  if (samples.length === 0) return '';
  const out = ['Samples (greedy): the end of each prompt, then its completion disaggregated and plain', ''];
  for (const s of samples) {
    const tail = s.prompt.split('\n').slice(-2).join('\n');
    out.push(`  #${s.index}  …${oneLine(tail)}`);
    out.push(`      disaggregated │ ${oneLine(s.disaggregated)}`);
    out.push(`      plain         │ ${oneLine(s.plain)}`);
    out.push(`      ${s.same_token_ids ? '✓ same token ids' : '✗ token ids differ'}`, '');
  }
  return out.join('\n').trimEnd();
}
