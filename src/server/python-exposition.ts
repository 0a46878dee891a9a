/**
 * Prometheus text as Python's prometheus_client writes it, from prom-client's: every
 * number is a Python float's repr, so `le="1"` becomes `le="1.0"` and a sample `5` becomes
 * `5.0`. Dashboards and alerts written against vLLM select `le="1.0"` literally (vLLM's
 * "TTFT SLO" panel does); with prom-client's `le="1"` they find nothing.
 */

/** Python's repr of a float whose JS text is `n` (integers gain ".0"; the rest is the same). */
function pyFloat(n: string): string {
  return /^-?\d+$/.test(n) && n.replace('-', '').length < 17 ? `${n}.0` : n;
}

export function toPythonExposition(text: string): string {
  return text
    .split('\n')
    .map((line) => {
      if (line === '' || line.startsWith('#')) return line;
      const space = line.lastIndexOf(' ');
      const series = line
        .slice(0, space)
        .replace(/([{,])le="([^"]*)"/, (_m, sep: string, le: string) => `${sep}le="${pyFloat(le)}"`);
      return `${series} ${pyFloat(line.slice(space + 1))}`;
    })
    .join('\n');
}
