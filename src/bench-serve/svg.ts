/**
 * A small self-contained SVG: histograms of TTFT and ITL side by side, with p50/p99
 * marked. Hand-written; it is a picture for humans, not a data format.
 */
import { distribution } from './metrics.ts';

const W = 360;
const H = 220;
const PAD = 36;
const BINS = 20;

function escapeXml(s: string): string {
  return s.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

function histogram(title: string, values: readonly number[], x0: number): string {
  const parts = [
    `<text x="${x0 + W / 2}" y="18" text-anchor="middle" font-size="13">${escapeXml(title)}</text>`,
  ];
  const plotW = W - 2 * PAD;
  const plotH = H - 2 * PAD;
  parts.push(
    `<line x1="${x0 + PAD}" y1="${H - PAD}" x2="${x0 + W - PAD}" y2="${H - PAD}" stroke="#333"/>`,
    `<line x1="${x0 + PAD}" y1="${PAD}" x2="${x0 + PAD}" y2="${H - PAD}" stroke="#333"/>`,
  );
  if (values.length === 0) {
    parts.push(`<text x="${x0 + W / 2}" y="${H / 2}" text-anchor="middle" font-size="12">no data</text>`);
    return parts.join('\n');
  }
  const min = Math.min(...values);
  const max = Math.max(...values);
  const span = max - min || 1;
  const counts = new Array<number>(BINS).fill(0);
  for (const v of values) counts[Math.min(BINS - 1, Math.floor(((v - min) / span) * BINS))]! += 1;
  const top = Math.max(...counts);
  const bw = plotW / BINS;
  counts.forEach((c, i) => {
    const h = (c / top) * plotH;
    parts.push(
      `<rect class="bar" x="${(x0 + PAD + i * bw).toFixed(1)}" y="${(H - PAD - h).toFixed(1)}" width="${(bw - 1).toFixed(1)}" height="${h.toFixed(1)}" fill="#4a7fb5"><title>${c}</title></rect>`,
    );
  });
  const d = distribution(values);
  for (const [name, v, color] of [
    ['p50', d.p50, '#2a9d2a'],
    ['p99', d.p99, '#c0392b'],
  ] as const) {
    const x = x0 + PAD + ((v - min) / span) * plotW;
    parts.push(
      `<line x1="${x.toFixed(1)}" y1="${PAD}" x2="${x.toFixed(1)}" y2="${H - PAD}" stroke="${color}" stroke-dasharray="4 3"/>`,
      `<text x="${x.toFixed(1)}" y="${PAD - 4}" text-anchor="middle" font-size="10" fill="${color}">${name} ${v.toFixed(1)}</text>`,
    );
  }
  parts.push(
    `<text x="${x0 + PAD}" y="${H - PAD + 14}" font-size="10">${min.toFixed(1)}</text>`,
    `<text x="${x0 + W - PAD}" y="${H - PAD + 14}" text-anchor="end" font-size="10">${max.toFixed(1)} ms</text>`,
    `<text x="${x0 + PAD - 4}" y="${PAD + 4}" text-anchor="end" font-size="10">${top}</text>`,
  );
  return parts.join('\n');
}

export function latencySvg(ttftMs: readonly number[], itlMs: readonly number[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${H}" viewBox="0 0 ${2 * W} ${H}" font-family="sans-serif">`,
    '<rect width="100%" height="100%" fill="white"/>',
    histogram(`TTFT (ms), ${ttftMs.length} requests`, ttftMs, 0),
    histogram(`ITL (ms), ${itlMs.length} gaps`, itlMs, W),
    '</svg>',
    '',
  ].join('\n');
}
