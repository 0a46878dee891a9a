import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ByteTokenizer } from '../../src/tokenizer/byte-tokenizer.ts';
import { IncrementalDetokenizer } from '../../src/tokenizer/detokenizer.ts';
import { HFTokenizer } from '../../src/tokenizer/hf-tokenizer.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvconnect-tok-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('byte tokenizer: BOS + UTF-8 bytes, round trip, special ids', () => {
  const tok = loadTokenizer('tiny');
  assert.ok(tok instanceof ByteTokenizer);
  const text = 'héllo, 世界 🙂';
  const ids = tok.encode(text);
  assert.equal(ids[0], 256);
  assert.deepEqual(ids.slice(1), [...Buffer.from(text, 'utf8')]);
  assert.equal(tok.decode(ids), text);
  assert.equal(tok.decode([...ids, tok.eosTokenId, 260]), text);
  assert.equal(tok.eosTokenId, 257);
  assert.equal(tok.vocabSize, 272);
  assert.equal(
    tok.applyChatTemplate([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]),
    '<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n',
  );
});

test('streaming detokenizer never emits broken UTF-8, whatever the split', () => {
  const tok = new ByteTokenizer();
  const text = 'a€b🙂c世';
  const ids = tok.encode(text).slice(1);
  for (let step = 1; step <= 4; step++) {
    const detok = new IncrementalDetokenizer(tok);
    let out = '';
    for (let i = 0; i < ids.length; i += step) {
      const piece = detok.push(ids.slice(i, i + step));
      assert.ok(!piece.includes('\uFFFD'), `step ${step}: emitted a broken character`);
      out += piece;
    }
    assert.equal(out + detok.flush(), text);
  }
  const detok = new IncrementalDetokenizer(tok);
  assert.equal(detok.push([0xf0, 0x9f]), '');
  assert.equal(detok.push([0x99]), '');
  assert.equal(detok.push([0x82, 0x41]), '🙂A');
});

function writeWordLevelTokenizer(target: string): void {
  const vocab: Record<string, number> = {
    '<unk>': 0,
    '<s>': 1,
    '</s>': 2,
    hello: 3,
    world: 4,
    kv: 5,
    cache: 6,
  };
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [
      {
        id: 0,
        content: '<unk>',
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
      },
      {
        id: 1,
        content: '<s>',
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
      },
      {
        id: 2,
        content: '</s>',
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
      },
    ],
    normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordLevel', vocab, unk_token: '<unk>' },
  };
  writeFileSync(join(target, 'tokenizer.json'), JSON.stringify(tokenizerJson));
  writeFileSync(
    join(target, 'tokenizer_config.json'),
    JSON.stringify({ bos_token: '<s>', eos_token: { content: '</s>' } }),
  );
}

test('a tokenizer.json next to the weights is used through @huggingface/tokenizers', () => {
  writeWordLevelTokenizer(dir);
  const tok = loadTokenizer(dir);
  assert.ok(tok instanceof HFTokenizer);
  const ids = tok.encode('Hello KV cache world');
  assert.deepEqual(ids, [1, 3, 5, 6, 4]);
  assert.equal(tok.decode(ids), 'hello kv cache world');
  assert.equal(tok.bosTokenId, 1);
  assert.equal(tok.eosTokenId, 2);
  assert.equal(tok.vocabSize, 7);
  assert.deepEqual(tok.encode('unknownword'), [1, 0]);
  const detok = new IncrementalDetokenizer(tok);
  const streamed = ids
    .slice(1)
    .map((id) => detok.push([id]))
    .join('');
  assert.equal(streamed, 'hello kv cache world');
});

test('a directory without tokenizer.json falls back to the byte tokenizer', () => {
  const empty = mkdtempSync(join(dir, 'empty-'));
  assert.ok(loadTokenizer(empty) instanceof ByteTokenizer);
});
