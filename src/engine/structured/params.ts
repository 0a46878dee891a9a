/**
 * vLLM's StructuredOutputsParams: the one constraint a request's output must follow. The
 * server builds it from `structured_outputs`, `response_format` and the `guided_*` fields.
 */
export interface StructuredOutputsParams {
  /** A JSON schema (object or its text). */
  json?: string | Record<string, unknown>;
  regex?: string;
  choice?: string[];
  /** An EBNF grammar (XGrammar's dialect, GBNF-like). */
  grammar?: string;
  /** Any JSON object. */
  jsonObject?: boolean;
  /**
   * XGrammar's structural tag as JSON text: `{"type": "structural_tag", "format": {...}}`, or
   * the legacy `{"structures": [{begin, schema, end}], "triggers": [...]}`.
   */
  structuralTag?: string;
  /** JSON without free whitespace between elements. */
  disableAnyWhitespace?: boolean;
}

export type StructuredOutputKind = 'json' | 'regex' | 'choice' | 'grammar' | 'json_object' | 'structural_tag';

/** The constraints a params object names (valid params name exactly one). */
export function constraintKinds(p: StructuredOutputsParams): StructuredOutputKind[] {
  const kinds: StructuredOutputKind[] = [];
  if (p.json !== undefined) kinds.push('json');
  if (p.regex !== undefined) kinds.push('regex');
  if (p.choice !== undefined) kinds.push('choice');
  if (p.grammar !== undefined) kinds.push('grammar');
  if (p.jsonObject === true) kinds.push('json_object');
  if (p.structuralTag !== undefined) kinds.push('structural_tag');
  return kinds;
}
