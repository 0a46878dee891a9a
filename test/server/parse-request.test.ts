/**
 * Parsing a completion request: a prompt of token ids is decoded to text only when `echo`
 * shows it (decoding a long prompt would otherwise cost every request's admission), and the
 * echoed text is the same as before.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TokenizerLike } from '../../src/engine/api.ts';
import { parseCompletionRequest } from '../../src/server/parse-request.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';

/** The tiny model's tokenizer, counting its decode calls. */
function countingTokenizer(): { tokenizer: TokenizerLike; decodes: () => number } {
  const real = loadTokenizer('tiny');
  let decodes = 0;
  const tokenizer = new Proxy(real, {
    get(target, key, receiver) {
      if (key === 'decode')
        return (...args: Parameters<TokenizerLike['decode']>) => {
          decodes++;
          return target.decode(...args);
        };
      const value = Reflect.get(target, key, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { tokenizer, decodes: () => decodes };
}

test('a prompt of token ids is not decoded without echo', () => {
  const { tokenizer, decodes } = countingTokenizer();
  const ids = tokenizer.encode('In the beginning God created the heaven and the earth.');
  const plan = parseCompletionRequest(
    { prompt: ids, max_tokens: 2, stream: true },
    { tokenizer, maxModelLen: 512 },
  );
  assert.deepEqual(plan.prompts, [ids]);
  assert.deepEqual(plan.promptTexts, []);
  assert.equal(decodes(), 0);
});

test('echo decodes a prompt of token ids, and shows a text prompt as sent', () => {
  const { tokenizer, decodes } = countingTokenizer();
  const text = 'And the earth was without form';
  const ids = tokenizer.encode(text);
  const fromIds = parseCompletionRequest(
    { prompt: ids, max_tokens: 2, echo: true },
    { tokenizer, maxModelLen: 512 },
  );
  assert.deepEqual(fromIds.promptTexts, [tokenizer.decode(ids)]);
  assert.equal(decodes(), 2); // the parse, and the expected value above
  const fromText = parseCompletionRequest(
    { prompt: text, max_tokens: 2, echo: true },
    { tokenizer, maxModelLen: 512 },
  );
  assert.deepEqual(fromText.promptTexts, [text]);
  assert.equal(decodes(), 2);
});
