/**
 * One small logger for every layer: leveled, named, human-readable lines on stderr (stdout
 * stays free for data), `%s`/`%d` placeholders as in vLLM's log strings, and a listener
 * hook so tests can assert that a warning was (or was not) emitted.
 *
 * A module's logger is named after its path, as vLLM's `init_logger(__name__)`: `kvconnect.`
 * plus the path under src/ with `/` → `.` and no extension (src/transfer/side-channel.ts logs
 * as `kvconnect.transfer.side-channel`); test/architecture.test.ts enforces it.
 */
import { format } from 'node:util';
import { readEnv } from '../util/envs.ts';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface LogRecord {
  level: Exclude<LogLevel, 'silent'>;
  name: string;
  message: string;
  time: number;
}

type Listener = (record: LogRecord) => void;
const listeners = new Set<Listener>();
const onceKeys = new Set<string>();

function envLevel(): LogLevel {
  const v = readEnv('KVCONNECT_LOG_LEVEL')?.toLowerCase();
  return v && v in ORDER ? (v as LogLevel) : 'info';
}
let threshold: LogLevel = envLevel();

export function setLogLevel(level: LogLevel): void {
  threshold = level;
}

/** Subscribe to every record (whatever the level threshold); returns the unsubscribe function. */
export function onLog(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Runs `fn` and returns what it logged (for tests). */
export async function captureLogs<T>(fn: () => T | Promise<T>): Promise<{ result: T; records: LogRecord[] }> {
  const records: LogRecord[] = [];
  const off = onLog((r) => records.push(r));
  try {
    return { result: await fn(), records };
  } finally {
    off();
  }
}

export interface Logger {
  debug(message: string, ...args: unknown[]): void;
  info(message: string, ...args: unknown[]): void;
  warn(message: string, ...args: unknown[]): void;
  error(message: string, ...args: unknown[]): void;
  /** Warn only the first time this exact message is produced in the process. */
  warnOnce(message: string, ...args: unknown[]): void;
}

export function getLogger(name: string): Logger {
  const emit = (level: Exclude<LogLevel, 'silent'>, message: string, args: unknown[]): void => {
    const text = args.length > 0 ? format(message, ...args) : message;
    const record: LogRecord = { level, name, message: text, time: Date.now() };
    for (const l of listeners) l(record);
    if (ORDER[level] >= ORDER[threshold]) {
      process.stderr.write(
        `${new Date(record.time).toISOString()} ${level.toUpperCase()} [${name}] ${text}\n`,
      );
    }
  };
  return {
    debug: (m, ...a) => emit('debug', m, a),
    info: (m, ...a) => emit('info', m, a),
    warn: (m, ...a) => emit('warn', m, a),
    error: (m, ...a) => emit('error', m, a),
    warnOnce: (m, ...a) => {
      const text = a.length > 0 ? format(m, ...a) : m;
      if (onceKeys.has(text)) return;
      onceKeys.add(text);
      emit('warn', text, []);
    },
  };
}
