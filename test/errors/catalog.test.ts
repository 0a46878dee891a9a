import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { catalogSection, ERRORS_DOC, renderErrorCatalog } from '../../scripts/errors-doc.ts';
import {
  type ErrorCode,
  errorCatalog,
  formatErrorJson,
  isErrorCode,
  KVError,
  statusOfCode,
  toErrorCode,
} from '../../src/errors/index.ts';

const SRC = new URL('../../src/', import.meta.url);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? sourceFiles(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

test('docs/errors.md holds the table generated from src/errors/codes.ts (run `npm run docs:errors`)', () => {
  const doc = readFileSync(ERRORS_DOC, 'utf8');
  assert.equal(catalogSection(doc), renderErrorCatalog());
});

test('every code the hand-written part of docs/errors.md names is declared', () => {
  const doc = readFileSync(ERRORS_DOC, 'utf8');
  const section = catalogSection(doc) ?? '';
  const named = [...doc.replace(section, '').matchAll(/`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`/g)].map(
    (m) => m[1]!,
  );
  assert.ok(named.length > 10);
  for (const code of named)
    assert.ok(isErrorCode(code), `${code} is named in docs/errors.md but not declared`);
});

test('every declared code is used outside the catalog (no stale entries), once each', () => {
  const files = sourceFiles(SRC.pathname).filter((f) => !f.endsWith(join('errors', 'codes.ts')));
  const text = files.map((f) => readFileSync(f, 'utf8')).join('\n');
  const codes = errorCatalog().map((e) => e.code);
  assert.equal(new Set(codes).size, codes.length, 'a code is declared twice');
  for (const code of codes) assert.ok(text.includes(`'${code}'`), `${code} is declared but never raised`);
});

test('a code carries its declared status; a code that crossed a thread as text is checked', () => {
  assert.equal(new KVError('SERVER_QUEUE_FULL', 'full').status, 503);
  assert.equal(new KVError('KV_CONFIG_INVALID', 'bad').status, 400);
  assert.equal(statusOfCode('PROXY_UPSTREAM_UNREACHABLE'), 502);
  for (const e of errorCatalog()) assert.ok(e.status >= 400 && e.status < 600, e.code);
  assert.equal(toErrorCode('KV_LOAD_FAILED', 'ENGINE_ERROR'), 'KV_LOAD_FAILED');
  assert.equal(toErrorCode('NOT_A_CODE', 'ENGINE_ERROR'), 'ENGINE_ERROR');
  assert.equal(toErrorCode(42, 'ENGINE_ERROR'), 'ENGINE_ERROR');
  // An external connector written in plain JavaScript may still throw a code of its own.
  const foreign = new KVError('MY_CONNECTOR_FAILED' as ErrorCode, 'boom');
  assert.equal(foreign.status, 500);
  assert.equal(formatErrorJson(foreign).error.type, 'InternalServerError');
});
