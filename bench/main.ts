/**
 * `npm run bench -- <name> [args...]` runs bench/<name>.ts. Each benchmark measures a
 * baseline in the same run, prints a table, and prints one JSON object as its last line.
 */
import { readdirSync } from 'node:fs';

const [name, ...args] = process.argv.slice(2);
const available = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.ts') && f !== 'main.ts' && !f.startsWith('_'))
  .map((f) => f.slice(0, -3))
  .sort();

if (!name || name === '--help' || name === '-h' || !available.includes(name)) {
  if (name && !available.includes(name) && name !== '--help' && name !== '-h') {
    console.error(`unknown benchmark '${name}'`);
  }
  console.error(`usage: npm run bench -- <name> [args]\navailable: ${available.join(', ')}`);
  process.exit(name && name !== '--help' && name !== '-h' ? 2 : 0);
}

const mod = (await import(`./${name}.ts`)) as { main: (args: string[]) => Promise<void> };
await mod.main(args);
