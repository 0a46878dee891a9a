/**
 * `npm run bench -- <name> [flags]` runs bench/<name>.ts; `npm run bench -- <name> --help`
 * lists its flags (bench/_args.ts). Each benchmark measures a baseline in the same run,
 * prints a table, and prints one JSON object as its last line.
 */
import { readdirSync } from 'node:fs';
import { closestNames } from '../src/config/config-error.ts';
import { tuneJit } from '../src/util/jit-tuning.ts';
import { BENCH_SUMMARIES } from './_args.ts';

const [name, ...args] = process.argv.slice(2);
const available = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.ts') && f !== 'main.ts' && !f.startsWith('_'))
  .map((f) => f.slice(0, -3))
  .sort();

function listing(): string {
  const width = Math.max(...available.map((b) => b.length));
  const summaries: Record<string, string> = BENCH_SUMMARIES;
  return [
    'usage: npm run bench -- <name> [flags]      (npm run bench -- <name> --help lists its flags)',
    '',
    'benchmarks:',
    ...available.map((b) => `  ${b.padEnd(width)}  ${summaries[b] ?? ''}`.trimEnd()),
  ].join('\n');
}

if (name === '--help' || name === '-h') {
  console.log(listing());
  process.exit(0);
}
if (name === undefined || !available.includes(name)) {
  const guess = name === undefined ? undefined : closestNames(name, available, 1)[0];
  const problem =
    name === undefined
      ? 'name a benchmark'
      : name.startsWith('-')
        ? `expected a benchmark's name first, got '${name}' (its flags go after the name)`
        : `unknown benchmark '${name}'${guess ? ` (did you mean '${guess}'?)` : ''}`;
  console.error(`bench: ${problem}\n\n${listing()}`);
  process.exit(2);
}

// Benchmarks run as the CLI does: KVCONNECT_V8_INTERRUPT_BUDGET applies when set (src/util/jit-tuning.ts).
try {
  tuneJit();
} catch (e) {
  console.error(`bench: ${(e as Error).message}`);
  process.exit(2);
}
const mod = (await import(`./${name}.ts`)) as { main: (args: string[]) => Promise<void> };
await mod.main(args);
