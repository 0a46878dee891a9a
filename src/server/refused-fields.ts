/**
 * Request fields vLLM answers with a 400, and fields kvconnect cannot serve: each is a 400
 * naming the field, never silently ignored.
 *
 * Structured outputs (response_format json_object / json_schema / structural_tag,
 * structured_outputs, the guided_* fields) are refused: vLLM applies them with XGrammar, and
 * `@mlc-ai/web-xgrammar` (the npm build of XGrammar) does not load under Node 20 as published
 * (its ES module entry is an Emscripten bundle that calls `require`, which ES modules lack;
 * with `require` provided it loads but exports nothing).
 */
import type { Body } from './fields.ts';
import { badRequest } from './fields.ts';

const STRUCTURED_OUTPUT_FIELDS = [
  'structured_outputs',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'guided_whitespace_pattern',
  'guided_decoding_backend',
  'structural_tag',
] as const;

function present(v: unknown): boolean {
  return v !== undefined && v !== null;
}

export function refuseUnsupported(body: Body, kind: 'completion' | 'chat'): void {
  if (kind === 'completion' && present(body['suffix']))
    throw badRequest(
      'suffix is not currently supported',
      'suffix',
      'Remove suffix: the served models have no fill-in-the-middle mode.',
    );
  if (present(body['stream_options']) && body['stream'] !== true)
    throw badRequest(
      'Stream options can only be defined when `stream=True`.',
      'stream_options',
      'Send "stream": true, or leave stream_options out.',
    );
  const format = body['response_format'];
  if (present(format)) {
    const type = (format as Body)?.['type'];
    if (type !== 'text')
      throw badRequest(
        `response_format ${JSON.stringify(type)} is not supported by this server: it has no structured-output backend.`,
        'response_format',
        'Leave response_format out (or use {"type": "text"}); XGrammar does not run under Node here.',
      );
  }
  for (const field of STRUCTURED_OUTPUT_FIELDS) {
    if (present(body[field]))
      throw badRequest(
        `${field} is not supported by this server: it has no structured-output backend.`,
        field,
        `Leave ${field} out; XGrammar does not run under Node here.`,
      );
  }
  if (kind === 'chat') refuseToolCalls(body);
}

/** vLLM: tools default tool_choice to "auto", which needs --enable-auto-tool-choice. */
function refuseToolCalls(body: Body): void {
  const tools = body['tools'];
  if (!Array.isArray(tools) || tools.length === 0) return;
  const choice = body['tool_choice'] ?? 'auto';
  if (choice === 'none') return;
  if (choice === 'auto')
    throw badRequest(
      '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
      'tool_choice',
      'kvconnect has no tool-call parser: send tool_choice "none" or leave tools out.',
    );
  throw badRequest(
    `tool_choice ${JSON.stringify(choice)} is not supported by this server: it has no structured-output backend.`,
    'tool_choice',
    'Send tool_choice "none" or leave tools out.',
  );
}
