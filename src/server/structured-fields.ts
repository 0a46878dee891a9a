/**
 * Structured-output request fields, read as vLLM reads them into StructuredOutputsParams:
 * `structured_outputs` ({json, regex, choice, grammar, json_object, disable_any_whitespace,
 * ...}), `response_format` ({"type": "json_object"} or {"type": "json_schema", "json_schema":
 * {"schema": ...}}, which replace the matching keys of structured_outputs), and the older
 * `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` fields (mapped as vLLM
 * 0.10–0.11 mapped them; current vLLM dropped them). A `response_format` of type
 * `structural_tag` is the structural tag itself, as vLLM passes it on. A backend the request
 * names (`structured_outputs.backend` / `_backend`, `guided_decoding_backend`) must be the
 * engine's, as vLLM checks. What cannot be served here is a 400 naming the field.
 */
import type { StructuredOutputsParams } from '../engine/api.ts';
import { type Body, badRequest, invalid } from './fields.ts';

const CONSTRAINTS = ['json', 'regex', 'choice', 'grammar', 'json_object', 'structural_tag'] as const;

const GUIDED: Record<string, (typeof CONSTRAINTS)[number]> = {
  guided_json: 'json',
  guided_regex: 'regex',
  guided_choice: 'choice',
  guided_grammar: 'grammar',
};

function present(v: unknown): boolean {
  return v !== undefined && v !== null;
}

/** The request's constraint, or null when it has none. */
export function readStructuredOutputs(body: Body): StructuredOutputsParams | null {
  const raw: Body = {};
  let field = 'structured_outputs';
  const so = body['structured_outputs'];
  if (present(so)) {
    if (typeof so !== 'object' || Array.isArray(so)) throw invalid('structured_outputs', 'an object', so);
    Object.assign(raw, so);
    for (const key of ['backend', '_backend'])
      checkBackend(raw[key], `structured_outputs.${key}`, key === 'backend' ? 'backend' : '_backend');
    // vLLM's check_structured_outputs_count, before the params object is built.
    if (['json', 'regex', 'choice'].filter((k) => present(raw[k])).length > 1)
      throw badRequest(
        "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
        'structured_outputs',
        'Keep one of json, regex and choice.',
      );
  }
  const guided = Object.keys(GUIDED).filter((k) => present(body[k]));
  if (guided.length > 0) {
    if (guided.filter((k) => k !== 'guided_grammar').length > 1)
      throw badRequest(
        "You can only use one kind of guided decoding ('guided_json', 'guided_regex' or 'guided_choice').",
        guided[0] as string,
        'Keep one of guided_json, guided_regex and guided_choice.',
      );
    for (const k of guided) raw[GUIDED[k] as string] = body[k];
    field = guided[0] as string;
  }
  readGuidedOptions(body);
  const format = body['response_format'];
  if (present(format)) {
    if (typeof format !== 'object' || Array.isArray(format))
      throw invalid('response_format', 'an object with "type"', format);
    const f = format as Body;
    if (f['type'] === 'json_object') raw['json_object'] = true;
    else if (f['type'] === 'json_schema') {
      const spec = f['json_schema'];
      if (typeof spec !== 'object' || spec === null || Array.isArray(spec))
        throw invalid('response_format.json_schema', 'an object with "name" and "schema"', spec);
      const schema = (spec as Body)['schema'] ?? null;
      if (!present(schema) || typeof schema !== 'object' || Array.isArray(schema))
        throw invalid('response_format.json_schema.schema', 'a JSON schema object', schema);
      raw['json'] = schema;
    } else if (f['type'] === 'structural_tag') raw['structural_tag'] = JSON.stringify(f);
    else if (f['type'] !== 'text')
      throw invalid(
        'response_format.type',
        '"text", "json_object", "json_schema" or "structural_tag"',
        f['type'],
      );
    if (f['type'] !== 'text') field = 'response_format';
  }
  if (!present(so) && guided.length === 0 && (!present(format) || (format as Body)['type'] === 'text'))
    return null;
  return toParams(raw, field);
}

/**
 * The engine's structured-output backend, as vLLM's default `--structured-outputs-config`
 * names it; `auto` runs XGrammar here for every constraint served.
 */
const ENGINE_BACKEND = 'auto';
/** Backends a request may name: the engine's, and the one it picks. */
const SERVED_BACKENDS: readonly unknown[] = [ENGINE_BACKEND, 'xgrammar'];

/**
 * A backend named in the request: vLLM's check that it is the engine's (request-level
 * backend selection is not supported), with vLLM's message.
 */
function checkBackend(value: unknown, field: string, key: string): void {
  if (!present(value) || SERVED_BACKENDS.includes(value)) return;
  throw badRequest(
    'Request-level structured output backend selection is not supported. ' +
      `The request specified '${String(value)}', but vLLM was initialised with '${ENGINE_BACKEND}'. ` +
      `This error can be resolved by removing '${key}' from the request.`,
    field,
    `Leave ${field} out: this server's structured outputs run on XGrammar (backend "${ENGINE_BACKEND}").`,
  );
}

/** guided_whitespace_pattern and guided_decoding_backend, as vLLM 0.10–0.11 took them. */
function readGuidedOptions(body: Body): void {
  checkBackend(body['guided_decoding_backend'], 'guided_decoding_backend', 'guided_decoding_backend');
  if (present(body['guided_whitespace_pattern'])) throw whitespacePatternRefused('guided_whitespace_pattern');
}

/** XGrammar takes no whitespace pattern (vLLM's xgrammar backend drops it): refused, never ignored. */
function whitespacePatternRefused(field: string): Error {
  return badRequest(
    `${field} is not supported by this server.`,
    field,
    'Leave the whitespace pattern out; use disable_any_whitespace for compact JSON.',
  );
}

function toParams(raw: Body, field: string): StructuredOutputsParams {
  const named = CONSTRAINTS.filter((k) => present(raw[k]));
  if (named.length > 1)
    throw badRequest(
      `You can only use one kind of structured outputs constraint but multiple are specified: ${named.join(', ')}`,
      field,
      'Send one constraint: json, regex, choice, grammar, json_object or structural_tag.',
    );
  if (named.length < 1)
    throw badRequest(
      'You must use one kind of structured outputs constraint but none are specified',
      field,
      'Add one of json, regex, choice, grammar or json_object to structured_outputs.',
    );
  // disable_additional_properties needs nothing: XGrammar's JSON schemas are strict already
  // (vLLM applies the flag to its guidance backend only).
  if (present(raw['whitespace_pattern']))
    throw whitespacePatternRefused('structured_outputs.whitespace_pattern');
  const out: StructuredOutputsParams = {};
  const name = (k: string) => (field === 'structured_outputs' ? `structured_outputs.${k}` : field);
  const json = raw['json'];
  if (present(json)) {
    if (typeof json !== 'string' && (typeof json !== 'object' || Array.isArray(json)))
      throw invalid(name('json'), 'a JSON schema (object or string)', json);
    out.json = json as string | Record<string, unknown>;
  }
  for (const k of ['regex', 'grammar'] as const) {
    const v = raw[k];
    if (!present(v)) continue;
    if (typeof v !== 'string' || v === '') throw invalid(name(k), 'a non-empty string', v);
    out[k] = v;
  }
  const tag = raw['structural_tag'];
  if (present(tag)) {
    if (typeof tag !== 'string' || !isJsonObjectText(tag))
      throw invalid(name('structural_tag'), 'a structural tag as JSON text (an object)', tag);
    out.structuralTag = tag;
  }
  const choice = raw['choice'];
  if (present(choice)) {
    if (!Array.isArray(choice) || choice.length === 0 || !choice.every((c) => typeof c === 'string'))
      throw invalid(name('choice'), 'a non-empty array of strings', choice);
    out.choice = choice as string[];
  }
  if (present(raw['json_object'])) {
    if (typeof raw['json_object'] !== 'boolean')
      throw invalid(name('json_object'), 'a boolean', raw['json_object']);
    out.jsonObject = raw['json_object'];
  }
  const compact = raw['disable_any_whitespace'];
  if (present(compact)) {
    if (typeof compact !== 'boolean')
      throw invalid('structured_outputs.disable_any_whitespace', 'a boolean', compact);
    out.disableAnyWhitespace = compact;
  }
  return out;
}

/** The field a request's constraint came from, for the 400 of a constraint XGrammar refuses. */
export function structuredOutputsField(body: Body): string {
  const text = body['text'];
  if (text !== null && typeof text === 'object' && present((text as Body)['format'])) return 'text';
  if (present(body['response_format']) && (body['response_format'] as Body)['type'] !== 'text')
    return 'response_format';
  return Object.keys(GUIDED).find((k) => present(body[k])) ?? 'structured_outputs';
}

function isJsonObjectText(text: string): boolean {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}
