/** Messages between ThreadedTransferAgent (main thread) and its worker (agent-thread-host.ts). */
import type { TransferAgentOptions } from './agent-options.ts';
import type { TransferStatsSnapshot } from './stats.ts';
import type { AgentMetadata, DescPair, Notification, TransferStatus } from './types.ts';

/** A threaded agent's settings: those of the agent it hosts, which reach its thread by structured clone. */
export type ThreadedAgentOptions = TransferAgentOptions;

export interface AgentThreadData {
  readonly options: ThreadedAgentOptions;
}

/** A region as it crosses threads: the worker builds its own view over the same memory. */
export interface SharedRegion {
  readonly id: number;
  readonly buffer: SharedArrayBuffer;
  readonly byteOffset: number;
  readonly byteLength: number;
  readonly blockBytes: number;
  readonly numBlocks: number;
}

export interface PlainGrantSpec {
  readonly peer?: string;
  readonly blockIds: number[];
  readonly regions?: number[];
  readonly expiresAt?: number;
}

export interface PlainError {
  readonly code: string;
  readonly message: string;
  readonly hint?: string;
}

export type ToAgentThread =
  | { readonly type: 'register'; readonly regions: readonly SharedRegion[] }
  | { readonly type: 'add-remote'; readonly meta: AgentMetadata }
  | { readonly type: 'remove-remote'; readonly name: string }
  | {
      readonly type: 'post';
      readonly id: number;
      readonly kind: 'READ' | 'WRITE';
      readonly remoteAgent: string;
      readonly descs: readonly DescPair[];
      readonly notification?: string;
      readonly grantKey?: string;
    }
  | { readonly type: 'notify'; readonly id: number; readonly remoteAgent: string; readonly message: string }
  | {
      readonly type: 'grant';
      readonly kind: 'read' | 'write';
      readonly key: string;
      readonly spec: PlainGrantSpec;
    }
  | { readonly type: 'revoke'; readonly key: string }
  | { readonly type: 'record'; readonly blockIds: readonly number[]; readonly regions?: readonly number[] }
  | { readonly type: 'forget'; readonly blockIds: readonly number[] }
  | { readonly type: 'renew'; readonly key: string; readonly expiresAt: number }
  | { readonly type: 'sync'; readonly id: number }
  | { readonly type: 'close' };

export type FromAgentThread =
  | { readonly type: 'ready'; readonly metadata: AgentMetadata }
  | { readonly type: 'init-error'; readonly error: PlainError }
  | { readonly type: 'done'; readonly id: number; readonly status: TransferStatus }
  | { readonly type: 'notify-result'; readonly id: number; readonly error?: PlainError }
  | { readonly type: 'notifications'; readonly items: readonly Notification[] }
  | { readonly type: 'waiting'; readonly count: number }
  | { readonly type: 'stats'; readonly delta: TransferStatsSnapshot }
  | { readonly type: 'command-error'; readonly what: string; readonly error: PlainError }
  | { readonly type: 'synced'; readonly id: number }
  | { readonly type: 'closed' };

export function toPlainError(e: unknown): PlainError {
  if (e instanceof Error) {
    const code = (e as { code?: unknown }).code;
    const hint = (e as { hint?: unknown }).hint;
    return {
      code: typeof code === 'string' ? code : 'TRANSFER_THREAD_ERROR',
      message: e.message,
      ...(typeof hint === 'string' ? { hint } : {}),
    };
  }
  return { code: 'TRANSFER_THREAD_ERROR', message: String(e) };
}
