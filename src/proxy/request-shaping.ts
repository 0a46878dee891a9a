/**
 * The bodies of each P/D leg (docs/proxy.md#flows-and-their-exact-parameters); the
 * kv_transfer_params they carry are src/wire/'s. Pure functions: given the client's body
 * they return what each leg sends, so tests can check every key.
 */

export type Json = Record<string, unknown>;

/**
 * The prefill leg's body: non-streaming, one token, one choice, no stream_options, no
 * min_tokens (the decode leg keeps all of these because it is sent the client's original
 * body). One choice: P answers with one choice's kv_transfer_params, so the blocks of any
 * other choice would stay pinned on P until their lease expired.
 */
export function prefillBody(body: Json, kvTransferParams: Json): Json {
  const out: Json = { ...body, kv_transfer_params: kvTransferParams, stream: false, max_tokens: 1 };
  if ('n' in body) out['n'] = 1;
  if ('max_completion_tokens' in body) out['max_completion_tokens'] = 1;
  delete out['stream_options'];
  delete out['min_tokens'];
  delete out['min_completion_tokens'];
  return out;
}

/** D in NIXL pull: the original body plus P's returned params (none → D recomputes). */
export function nixlPullDecodeBody(body: Json, prefillParams: Json | null): Json {
  if (prefillParams === null || Object.keys(prefillParams).length === 0) return { ...body };
  return { ...body, kv_transfer_params: prefillParams };
}

/** vLLM's MoRIIO toy proxy asks D for one token less (the optional compatibility quirk). */
export function decrementMaxTokens(body: Json): Json {
  const out = { ...body };
  for (const key of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = out[key];
    if (typeof v === 'number' && v > 1) out[key] = v - 1;
  }
  return out;
}
