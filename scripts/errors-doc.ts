/**
 * Writes the error-code table of docs/errors.md from src/errors/codes.ts
 * (`npm run docs:errors`); test/errors/catalog.test.ts fails when the two differ.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type ErrorArea, errorCatalog } from '../src/errors/codes.ts';

export const ERRORS_DOC = new URL('../docs/errors.md', import.meta.url);
const BEGIN = '<!-- error-catalog:begin — generated from src/errors/codes.ts by `npm run docs:errors` -->';
const END = '<!-- error-catalog:end -->';

const AREA_TITLES: Record<ErrorArea, string> = {
  config: 'Configuration',
  connector: 'Connector API, factory and registry',
  kv: 'KV cache',
  engine: 'Engine, model and tokenizer',
  transfer: 'Transfer agent and side channel',
  nixl: 'NixlConnector',
  moriio: 'MoRIIOConnector',
  lora: 'LoRA adapters',
  server: 'OpenAI-compatible server',
  proxy: 'Proxy and discovery',
  tools: 'Demo and bench',
};

export function renderErrorCatalog(): string {
  const lines = [BEGIN];
  let area: ErrorArea | null = null;
  for (const e of errorCatalog()) {
    if (e.area !== area) {
      area = e.area;
      lines.push('', `### ${AREA_TITLES[area]}`, '', '| code | HTTP | meaning |', '|---|---|---|');
    }
    lines.push(`| \`${e.code}\` | ${e.status} | ${e.meaning} |`);
  }
  lines.push('', END);
  return lines.join('\n');
}

/** The generated part of a document, or null when its markers are missing. */
export function catalogSection(doc: string): string | null {
  const start = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  return start < 0 || end < start ? null : doc.slice(start, end + END.length);
}

function main(): void {
  const doc = readFileSync(ERRORS_DOC, 'utf8');
  const current = catalogSection(doc);
  const next =
    current === null
      ? `${doc.trimEnd()}\n\n## Every code\n\n${renderErrorCatalog()}\n`
      : doc.replace(current, renderErrorCatalog());
  writeFileSync(ERRORS_DOC, next);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
