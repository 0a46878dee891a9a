/**
 * Request fields vLLM answers with a 400, and fields kvconnect cannot serve: each is a 400
 * naming the field, never silently ignored.
 *
 * Structured outputs are read in ./structured-fields.ts (what cannot be served there is a 400
 * naming its field).
 */
import type { Body } from './fields.ts';
import { badRequest } from './fields.ts';

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
  if (present(body['structural_tag']))
    throw badRequest(
      'structural_tag is not a request field.',
      'structural_tag',
      'Send it as structured_outputs.structural_tag (JSON text) or as response_format {"type": "structural_tag", ...}.',
    );
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
    `tool_choice ${JSON.stringify(choice)} is not supported by this server: it has no tool-call parser.`,
    'tool_choice',
    'Send tool_choice "none" or leave tools out.',
  );
}
