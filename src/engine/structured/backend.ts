/**
 * The structured-output backend of one thread: XGrammar's TokenizerInfo of the served
 * vocabulary, its GrammarCompiler, a cache of compiled constraints, and per-request matchers
 * (as vLLM's xgrammar backend). Built on the first structured request: requests without a
 * constraint never load XGrammar.
 */
import type { CompiledGrammar, GrammarCompiler } from '@mlc-ai/web-xgrammar';
import { KVError } from '../../errors/index.ts';
import type { TokenizerLike } from '../../tokenizer/types.ts';
import { RequestGrammar } from './matcher.ts';
import { constraintKinds, type StructuredOutputsParams } from './params.ts';
import { loadXGrammar } from './xgrammar-loader.ts';

export class StructuredOutputBackend {
  readonly #tokenizer: () => TokenizerLike;
  readonly #vocabSize: number;
  #compiler: Promise<GrammarCompiler> | null = null;
  readonly #cache = new Map<string, Promise<CompiledGrammar>>();

  /** `vocabSize`: the model's logits width (may exceed the tokenizer's vocabulary). */
  constructor(tokenizer: () => TokenizerLike, vocabSize: number) {
    this.#tokenizer = tokenizer;
    this.#vocabSize = vocabSize;
  }

  /** Compiles (or finds in the cache) the request's constraint; a 400 when it is invalid. */
  compile(params: StructuredOutputsParams): Promise<CompiledGrammar> {
    const key = JSON.stringify(params);
    let compiled = this.#cache.get(key);
    if (!compiled) {
      compiled = this.#compile(params);
      compiled.catch(() => this.#cache.delete(key));
      this.#cache.set(key, compiled);
    }
    return compiled;
  }

  /** A matcher for one request, advanced past the output tokens it already has. */
  async matcher(params: StructuredOutputsParams, outputTokenIds: readonly number[]): Promise<RequestGrammar> {
    const xg = loadXGrammar();
    const compiled = await this.compile(params);
    const grammar = new RequestGrammar(
      await xg.GrammarMatcher.createGrammarMatcher(compiled),
      this.#vocabSize,
    );
    for (const id of outputTokenIds) grammar.accept(id);
    return grammar;
  }

  async #compile(params: StructuredOutputsParams): Promise<CompiledGrammar> {
    const compiler = await this.#getCompiler();
    const [kind] = constraintKinds(params);
    const anyWhitespace = params.disableAnyWhitespace !== true;
    try {
      switch (kind) {
        case 'json':
          return await compiler.compileJSONSchema(
            typeof params.json === 'string' ? params.json : JSON.stringify(params.json),
            anyWhitespace,
          );
        case 'json_object':
          return await compiler.compileJSONSchema('{"type": "object"}', anyWhitespace);
        case 'regex':
          return await compiler.compileStructuralTag({
            type: 'structural_tag',
            format: { type: 'regex', pattern: params.regex as string },
          });
        case 'choice':
          return await compiler.compileGrammar(choiceGrammar(params.choice as string[]));
        case 'grammar':
          return await compiler.compileGrammar(params.grammar as string);
        case 'structural_tag':
          return await compileStructuralTag(compiler, params.structuralTag as string);
        default:
          throw new Error('no structured-output constraint given');
      }
    } catch (cause) {
      throw invalidConstraint(kind ?? 'json', cause);
    }
  }

  #getCompiler(): Promise<GrammarCompiler> {
    this.#compiler ??= (async () => {
      const xg = loadXGrammar();
      const tokenizer = this.#tokenizer();
      const vocabulary = tokenizer.grammarVocabulary?.();
      if (!vocabulary)
        throw new KVError(
          'SERVER_INVALID_REQUEST',
          'The served tokenizer does not describe its vocabulary for XGrammar',
          {
            hint: 'Serve a model with a tokenizer.json or the byte tokenizer to use structured outputs.',
          },
        );
      const tokens = vocabulary.tokens.slice(0, this.#vocabSize);
      while (tokens.length < this.#vocabSize) tokens.push('');
      const info = await xg.TokenizerInfo.createTokenizerInfo(
        tokens,
        vocabulary.kind,
        vocabulary.prependSpace,
        this.#vocabSize,
        tokenizer.eosTokenId >= 0 ? [tokenizer.eosTokenId] : [],
      );
      return xg.GrammarCompiler.createGrammarCompiler(info);
    })();
    return this.#compiler;
  }
}

/** vLLM's xgrammar backend: the legacy form (structures + triggers) or the format object. */
function compileStructuralTag(compiler: GrammarCompiler, text: string): Promise<CompiledGrammar> {
  const tag = JSON.parse(text) as Record<string, unknown>;
  if (!Array.isArray(tag['structures'])) return compiler.compileStructuralTag(text);
  const xg = loadXGrammar();
  const items = (tag['structures'] as Array<Record<string, unknown>>).map(
    (s) =>
      new xg.StructuralTagItem(String(s['begin']), s['schema'] as Record<string, unknown>, String(s['end'])),
  );
  return compiler.compileStructuralTag(items, (tag['triggers'] as string[] | undefined) ?? []);
}

/** vLLM's choice → grammar: one alternative per choice, each a quoted literal. */
export function choiceGrammar(choices: readonly string[]): string {
  return `root ::= ${choices.map((c) => JSON.stringify(c)).join(' | ')}`;
}

const WHAT: Record<string, string> = {
  json: 'JSON schema',
  json_object: 'JSON object grammar',
  regex: 'regular expression',
  choice: 'choice list',
  grammar: 'grammar specification',
  structural_tag: 'structural tag',
};

function invalidConstraint(kind: string, cause: unknown): KVError {
  return new KVError(
    'SERVER_INVALID_REQUEST',
    `Invalid ${WHAT[kind] ?? kind}: XGrammar could not compile it.`,
    {
      field: 'structured_outputs',
      hint:
        kind === 'grammar'
          ? 'Send an EBNF grammar in XGrammar\'s dialect with a "root" rule, e.g. root ::= "yes" | "no".'
          : kind === 'regex'
            ? 'Send a regular expression XGrammar supports (no lookaround or backreferences).'
            : 'Send a valid JSON schema (draft 2020-12 keywords XGrammar supports).',
      cause,
    },
  );
}
