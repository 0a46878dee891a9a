/**
 * Writes the table of docs/environment.md from src/util/envs.ts
 * (`node --import tsx scripts/env-doc.ts`); test/docs/environment.test.ts fails when the two differ.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ENV_VARS } from '../src/util/envs.ts';

export const ENV_DOC = new URL('../docs/environment.md', import.meta.url);
const BEGIN =
  '<!-- env-vars:begin — generated from src/util/envs.ts by `node --import tsx scripts/env-doc.ts` -->';
const END = '<!-- env-vars:end -->';

export function renderEnvTable(): string {
  const rows = Object.entries(ENV_VARS).map(
    ([name, v]) => `| \`${name}\` | ${v.type} | ${v.default} | ${v.doc} |`,
  );
  return [
    BEGIN,
    '',
    '| variable | value | default | what it does |',
    '|---|---|---|---|',
    ...rows,
    '',
    END,
  ].join('\n');
}

function main(): void {
  const doc = readFileSync(ENV_DOC, 'utf8');
  const start = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (start < 0 || end < start) throw new Error(`${fileURLToPath(ENV_DOC)} has no ${BEGIN} … ${END} section`);
  writeFileSync(ENV_DOC, doc.slice(0, start) + renderEnvTable() + doc.slice(end + END.length));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
