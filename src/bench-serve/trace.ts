/**
 * Mooncake-format traces: one JSON object per line with `timestamp` (ms from start),
 * `input_length`, `output_length` (tokens) and `hash_ids` (one id per 512-token prefix
 * block; equal ids mean a shared prefix). Malformed lines are reported with their line
 * numbers and skipped.
 */
import { readFileSync } from 'node:fs';
import { KVError } from '../errors/index.ts';

/** Tokens per hash id in Mooncake's traces. */
export const TRACE_BLOCK_TOKENS = 512;

export interface TraceEntry {
  timestampMs: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
  /** 1-based line in the file. */
  line: number;
}

export interface TraceProblem {
  line: number;
  message: string;
}

export interface ParsedTrace {
  entries: TraceEntry[];
  problems: TraceProblem[];
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function parseLine(text: string): Omit<TraceEntry, 'line'> {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error('not valid JSON');
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error('not a JSON object');
  const o = raw as Record<string, unknown>;
  if (typeof o['timestamp'] !== 'number' || !(o['timestamp'] >= 0)) {
    throw new Error('timestamp must be a number of milliseconds >= 0');
  }
  if (!isCount(o['input_length'])) throw new Error('input_length must be a non-negative integer');
  if (!isCount(o['output_length'])) throw new Error('output_length must be a non-negative integer');
  const ids = o['hash_ids'];
  if (!Array.isArray(ids) || !ids.every(isCount))
    throw new Error('hash_ids must be an array of non-negative integers');
  return {
    timestampMs: o['timestamp'],
    inputLength: o['input_length'],
    outputLength: o['output_length'],
    hashIds: ids as number[],
  };
}

export function parseTrace(text: string): ParsedTrace {
  const entries: TraceEntry[] = [];
  const problems: TraceProblem[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    try {
      entries.push({ ...parseLine(line), line: i + 1 });
    } catch (e) {
      problems.push({ line: i + 1, message: (e as Error).message });
    }
  }
  return { entries, problems };
}

export function loadTrace(path: string): ParsedTrace {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new KVError('BENCH_TRACE_UNREADABLE', `Cannot read trace file ${path}: ${(e as Error).message}`, {
      hint: 'Pass --trace with the path of a Mooncake-format JSONL file.',
      cause: e,
    });
  }
  const parsed = parseTrace(text);
  if (parsed.entries.length === 0) {
    const first = parsed.problems[0];
    throw new KVError('BENCH_TRACE_EMPTY', `Trace file ${path} has no valid requests`, {
      hint: first
        ? `Line ${first.line}: ${first.message}. Each line must be {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}.`
        : 'The file is empty.',
    });
  }
  return parsed;
}
