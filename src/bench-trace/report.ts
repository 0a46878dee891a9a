/**
 * The trace simulator's outputs: a table for people, one JSON object (snake_case, units in
 * the names) and an SVG curve of hit ratio against cache capacity (log scale), like the
 * Mooncake paper's Figure 9. The SVG is hand-written: a picture, not a data format.
 */
import type { SimulationResult } from './simulate.ts';
import type { TraceReuse } from './trace-reuse.ts';

export interface TraceSimulationReport {
  trace: string;
  requests: number;
  block_size_tokens: number;
  /** Leading hash ids seen before × 512 over all input tokens (how the trace's README counts). */
  trace_reuse_ratio: number;
  /** The same with an engine's rules: full blocks only, the last prompt token always computed. */
  engine_rule_reuse_ratio: number;
  points: SimulationResult[];
}

export function buildReport(
  trace: string,
  requests: number,
  blockSize: number,
  reuse: TraceReuse,
  points: SimulationResult[],
): TraceSimulationReport {
  return {
    trace,
    requests,
    block_size_tokens: blockSize,
    trace_reuse_ratio: reuse.traceHitTokens / reuse.promptTokens,
    engine_rule_reuse_ratio: reuse.engineHitTokens / reuse.promptTokens,
    points,
  };
}

const pct = (x: number): string => `${(100 * x).toFixed(2)}%`;

function bytes(n: number | null): string {
  if (n === null) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(v < 10 && u > 0 ? 1 : 0)} ${units[u]}`;
}

export function formatReport(r: TraceSimulationReport): string {
  const head = [
    'device blocks',
    'device tokens',
    'CPU tier',
    'hit ratio',
    'device',
    'CPU',
    'steps',
    'seconds',
  ];
  const rows = r.points.map((p) => [
    `${p.device_blocks}${p.device_unbounded ? ' (unbounded)' : ''}`,
    String(p.device_blocks * r.block_size_tokens),
    bytes(p.cpu_bytes),
    pct(p.hit_ratio),
    pct(p.device_hit_ratio),
    pct(p.cpu_hit_ratio),
    String(p.steps),
    p.seconds.toFixed(1),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  return [
    `Trace ${r.trace}: ${r.requests} requests, blocks of ${r.block_size_tokens} tokens`,
    `  the trace's own reuse (leading hash ids seen before x 512): ${pct(r.trace_reuse_ratio)}`,
    `  reachable by a prefix cache (full blocks, last token computed): ${pct(r.engine_rule_reuse_ratio)}`,
    '',
    line(head),
    ...rows.map(line),
    '',
  ].join('\n');
}

export function reportJson(r: TraceSimulationReport): string {
  return JSON.stringify(r);
}

/** Hit ratio (y) against device capacity in tokens (x, log10), one polyline per CPU tier size. */
export function hitRatioSvg(r: TraceSimulationReport): string {
  const W = 560;
  const H = 340;
  const PAD = 56;
  const pts = r.points.map((p) => ({
    x: Math.log10(Math.max(1, p.device_blocks * r.block_size_tokens)),
    y: p.hit_ratio,
    series: bytes(p.cpu_bytes),
  }));
  const xs = pts.map((p) => p.x);
  const x0 = Math.floor(Math.min(...xs, 4));
  const x1 = Math.ceil(Math.max(...xs, x0 + 1));
  const sx = (x: number) => PAD + ((x - x0) / (x1 - x0)) * (W - 2 * PAD);
  const sy = (y: number) => H - PAD - y * (H - 2 * PAD);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="13">Prefix-cache hit ratio vs device cache capacity</text>`,
    `<line x1="${PAD}" y1="${H - PAD}" x2="${W - PAD}" y2="${H - PAD}" stroke="#333"/>`,
    `<line x1="${PAD}" y1="${PAD}" x2="${PAD}" y2="${H - PAD}" stroke="#333"/>`,
    `<text x="${W / 2}" y="${H - 16}" text-anchor="middle">device capacity (tokens, log scale)</text>`,
  ];
  for (let x = x0; x <= x1; x++) {
    parts.push(`<text x="${sx(x)}" y="${H - PAD + 16}" text-anchor="middle">1e${x}</text>`);
  }
  for (let y = 0; y <= 1.0001; y += 0.2) {
    parts.push(
      `<text x="${PAD - 6}" y="${sy(y) + 4}" text-anchor="end">${Math.round(y * 100)}%</text>`,
      `<line x1="${PAD}" y1="${sy(y)}" x2="${W - PAD}" y2="${sy(y)}" stroke="#ddd"/>`,
    );
  }
  const ref = sy(r.trace_reuse_ratio);
  parts.push(
    `<line x1="${PAD}" y1="${ref}" x2="${W - PAD}" y2="${ref}" stroke="#b55" stroke-dasharray="4 3"/>`,
    `<text x="${W - PAD}" y="${ref - 4}" text-anchor="end" fill="#b55">trace reuse ${pct(r.trace_reuse_ratio)}</text>`,
  );
  const colors = ['#4a7fb5', '#5a9e4b', '#c9822b', '#8e5ab5'];
  const series = [...new Set(pts.map((p) => p.series))];
  series.forEach((name, i) => {
    const line = pts.filter((p) => p.series === name).sort((a, b) => a.x - b.x);
    const color = colors[i % colors.length]!;
    parts.push(
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${line.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(' ')}"/>`,
      ...line.map(
        (p) =>
          `<circle cx="${sx(p.x).toFixed(1)}" cy="${sy(p.y).toFixed(1)}" r="3" fill="${color}"><title>${pct(p.y)}</title></circle>`,
      ),
      `<text x="${PAD + 8}" y="${PAD + 14 * (i + 1)}" fill="${color}">CPU tier ${name}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('\n');
}
