/**
 * NIXL pull with kv_transfer_params ahead (docs/proxy.md#params-ahead): the proxy asks P for
 * its params ahead and sends D when P's 103 brings them, during P's prefill; P's answer must
 * carry the same params, else that decode leg is aborted and D is sent P's answer; a P that
 * fails after its 103 takes that decode leg down with it. With `paramsAhead: false` the proxy
 * neither asks nor acts on a 103.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { writeEarlyHints } from '../../src/http/index.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { formatParamsAhead, PARAMS_AHEAD_HEADER, PARAMS_AHEAD_HINT } from '../../src/wire/index.ts';
import {
  decodeResponder,
  json,
  P_RETURNED_PARAMS,
  type Responder,
  sleep,
  UpstreamDouble,
  withProxy,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

const BODY = { model: 'tiny', prompt: 'hello world', max_tokens: 4, stream: true, temperature: 0 };
const PREFILL_MS = 150;

/**
 * A prefill double that, when asked, sends `ahead` in a 103 at once, then answers after
 * PREFILL_MS with `answer` (status 200) or `status`; records when it answered.
 */
function aheadPrefill(
  ahead: Record<string, unknown>,
  answer: Record<string, unknown>,
  status = 200,
): { respond: Responder; answeredAt: number[] } {
  const answeredAt: number[] = [];
  const respond: Responder = async (rec, res) => {
    if (rec.headers[PARAMS_AHEAD_HEADER] === '1') {
      assert.ok(writeEarlyHints(res, { [PARAMS_AHEAD_HINT]: formatParamsAhead(ahead) }));
    }
    await sleep(PREFILL_MS);
    answeredAt.push(performance.now());
    if (status !== 200) json(res, status, { error: { message: 'prefill failed', code: status } });
    else json(res, 200, { id: 'cmpl-p', choices: [{ index: 0, text: 'P' }], kv_transfer_params: answer });
  };
  return { respond, answeredAt };
}

async function complete(url: string): Promise<string> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(BODY),
  });
  assert.equal(res.status, 200);
  return res.text();
}

describe('kv_transfer_params ahead (NIXL pull)', () => {
  test('D is sent on P’s 103, before P answers, once, with the announced params', async () => {
    const prefill = aheadPrefill(P_RETURNED_PARAMS, P_RETURNED_PARAMS);
    const p = await UpstreamDouble.start(prefill.respond);
    const d = await UpstreamDouble.start(decodeResponder(3));
    await withProxy([p], [d], {}, async (url) => {
      const text = await complete(url);
      assert.match(text, /tok2[\s\S]*\[DONE\]/);
      assert.equal(p.completions()[0]!.headers[PARAMS_AHEAD_HEADER], '1');
      const legs = d.completions();
      assert.equal(legs.length, 1, 'one decode leg');
      assert.deepEqual(legs[0]!.body['kv_transfer_params'], P_RETURNED_PARAMS);
      assert.ok(
        legs[0]!.at < prefill.answeredAt[0]!,
        `D was sent ${(legs[0]!.at - prefill.answeredAt[0]!).toFixed(1)} ms after P answered`,
      );
    });
  });

  test('P answers other params than it announced: that decode leg is aborted, D gets the answer’s', async () => {
    const answer = { ...P_RETURNED_PARAMS, remote_block_ids: [[7, 8, 9]] };
    const prefill = aheadPrefill(P_RETURNED_PARAMS, answer);
    const p = await UpstreamDouble.start(prefill.respond);
    // The decode leg sent ahead would stream only after P's answer: it is aborted before.
    const d = await UpstreamDouble.start(async (rec, res) => {
      await sleep(PREFILL_MS * 2);
      await decodeResponder(3)(rec, res);
    });
    await withProxy([p], [d], {}, async (url) => {
      assert.match(await complete(url), /tok2[\s\S]*\[DONE\]/);
      const legs = d.completions();
      assert.equal(legs.length, 2);
      assert.deepEqual(legs[0]!.body['kv_transfer_params'], P_RETURNED_PARAMS);
      assert.equal(legs[0]!.closedEarly, true, 'the leg sent ahead was aborted');
      assert.deepEqual(legs[1]!.body['kv_transfer_params'], answer);
      assert.equal(legs[1]!.closedEarly, false);
    });
  });

  test('P fails after its 103: the decode leg sent ahead is aborted, the request falls back', async () => {
    const prefill = aheadPrefill(P_RETURNED_PARAMS, P_RETURNED_PARAMS, 500);
    const p = await UpstreamDouble.start(prefill.respond);
    const d = await UpstreamDouble.start(async (rec, res) => {
      if (rec.body['kv_transfer_params'] !== undefined) await sleep(PREFILL_MS * 2);
      await decodeResponder(3)(rec, res);
    });
    await withProxy([p], [d], { maxRetries: 0 }, async (url) => {
      assert.match(await complete(url), /tok2[\s\S]*\[DONE\]/);
      const legs = d.completions();
      assert.equal(legs.length, 2);
      assert.equal(legs[0]!.closedEarly, true, 'the leg sent ahead was aborted');
      assert.equal(legs[1]!.body['kv_transfer_params'], undefined, 'then served by D alone');
    });
  });

  test('paramsAhead: false asks for nothing and sends D after P answered', async () => {
    const prefill = aheadPrefill(P_RETURNED_PARAMS, P_RETURNED_PARAMS);
    const p = await UpstreamDouble.start(prefill.respond);
    const d = await UpstreamDouble.start(decodeResponder(3));
    await withProxy([p], [d], { paramsAhead: false }, async (url) => {
      assert.match(await complete(url), /tok2[\s\S]*\[DONE\]/);
      assert.equal(p.completions()[0]!.headers[PARAMS_AHEAD_HEADER], undefined);
      const legs = d.completions();
      assert.equal(legs.length, 1);
      assert.ok(legs[0]!.at >= prefill.answeredAt[0]!);
    });
  });
});
