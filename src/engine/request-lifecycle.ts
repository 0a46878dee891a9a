/**
 * The connector lifecycle of a request as an explicit state machine. vLLM spreads this state
 * over `status`, several id sets and "zombie" requests, and leaked blocks because of it
 * (docs/scheduler.md#the-connector-lifecycle-srcenginerequest-lifecyclets). Here every change
 * goes through `transition`, which rejects illegal moves, and `assertInvariants` checks a
 * scheduler snapshot in tests.
 *
 *   WAITING ─▶ LOOKUP_PENDING ─▶ ALLOCATED ─▶ WAITING_FOR_REMOTE_KV ─▶ LOADED | FAILED
 *      │                            │                                     │
 *      └────────────────────────────┴──────────▶ RUNNING ◀────────────────┘
 *   RUNNING ─▶ PREEMPTED (back to the queue) | FINISHED ─▶ HANDOFF_PENDING ─▶ FREED
 */
import type { RequestStatus } from '../connector/types.ts';
import { KVError } from '../errors/kv-error.ts';
import type { KVCacheManager } from '../kv/interfaces.ts';

export type LifecycleState =
  | 'WAITING'
  | 'LOOKUP_PENDING'
  | 'ALLOCATED'
  | 'WAITING_FOR_REMOTE_KV'
  | 'LOADED'
  | 'FAILED'
  | 'RUNNING'
  | 'PREEMPTED'
  | 'FINISHED'
  | 'HANDOFF_PENDING'
  | 'FREED';

const TRANSITIONS: Readonly<Record<LifecycleState, readonly LifecycleState[]>> = {
  WAITING: ['LOOKUP_PENDING', 'ALLOCATED', 'FINISHED'],
  LOOKUP_PENDING: ['LOOKUP_PENDING', 'WAITING', 'ALLOCATED', 'FINISHED'],
  ALLOCATED: ['WAITING_FOR_REMOTE_KV', 'RUNNING'],
  WAITING_FOR_REMOTE_KV: ['LOADED', 'FAILED', 'FINISHED'],
  // LOADED: the transfer is done and the request holds its blocks while it waits for a slot.
  // (FAILED again when a worker reports a load error in the step of finished_recving.)
  LOADED: ['ALLOCATED', 'FAILED', 'FINISHED'],
  // FAILED: recompute policy; promotion keeps the valid prefix (LOADED) or frees all (WAITING).
  FAILED: ['LOADED', 'WAITING', 'FINISHED'],
  RUNNING: ['PREEMPTED', 'FINISHED'],
  PREEMPTED: ['LOOKUP_PENDING', 'ALLOCATED', 'FINISHED'],
  FINISHED: ['HANDOFF_PENDING', 'FREED'],
  HANDOFF_PENDING: ['FREED'],
  FREED: [],
};

/** States of a request in the waiting queue. */
export const QUEUED_STATES: ReadonlySet<LifecycleState> = new Set([
  'WAITING',
  'LOOKUP_PENDING',
  'WAITING_FOR_REMOTE_KV',
  'LOADED',
  'FAILED',
  'PREEMPTED',
]);

/** Queued states in which a request holds no KV blocks. */
export const BLOCKLESS_STATES: ReadonlySet<LifecycleState> = new Set([
  'WAITING',
  'LOOKUP_PENDING',
  'PREEMPTED',
]);

export function canTransition(from: LifecycleState, to: LifecycleState): boolean {
  return TRANSITIONS[from].includes(to);
}

export interface LifecycleSubject {
  readonly requestId: string;
  lifecycle: LifecycleState;
}

export function transition(subject: LifecycleSubject, to: LifecycleState): void {
  const from = subject.lifecycle;
  if (!canTransition(from, to)) throw lifecycleViolation(subject.requestId, from, to);
  subject.lifecycle = to;
}

export function lifecycleViolation(requestId: string, from: LifecycleState, to: LifecycleState): KVError {
  return new KVError(
    'KV_LIFECYCLE_VIOLATION',
    `Request ${requestId}: illegal lifecycle transition ${from} -> ${to}`,
    {
      hint: 'This is a scheduler bug: a request changed state in an order the connector protocol does not allow. Please report it with the request id.',
      details: { requestId, from, to },
    },
  );
}

// ---- invariants (for tests, and for debugging a scheduler that misbehaves) ----

export interface LifecycleRequestView extends LifecycleSubject {
  readonly status: RequestStatus;
  readonly numComputedTokens: number;
  readonly numTokens: number;
  readonly pendingHandoff: { recv: boolean; send: boolean } | null;
  readonly handoffBlockIds: number[][] | null;
}

export interface InspectableScheduler {
  readonly core: {
    readonly requests: ReadonlyMap<string, LifecycleRequestView>;
    readonly waiting: readonly LifecycleRequestView[];
    readonly running: readonly LifecycleRequestView[];
    readonly recentlyFreed: readonly LifecycleRequestView[];
    readonly kv: KVCacheManager;
  };
}

function heldBlockIds(kv: KVCacheManager, requestId: string): number[] {
  return kv
    .getBlockIds(requestId)
    .flat()
    .filter((id) => id !== 0);
}

/**
 * Throws a KVError (KV_LIFECYCLE_INVARIANT) naming the first broken invariant:
 * queues hold only queued/running states, once each; a finished request in the map is
 * HANDOFF_PENDING, in no queue, and still holds the blocks it handed to the connector;
 * blockless states hold no blocks; freed requests hold nothing and are forgotten; and the
 * blocks in use are exactly those held by live and hand-off-pending requests.
 */
export function assertInvariants(scheduler: InspectableScheduler): void {
  const { requests, waiting, running, recentlyFreed, kv } = scheduler.core;
  const fail = (requestId: string, message: string): never => {
    throw new KVError('KV_LIFECYCLE_INVARIANT', `Request ${requestId}: ${message}`, {
      hint: 'This is a scheduler bug; the message names the broken invariant.',
      details: { requestId },
    });
  };
  const seen = new Set<string>();
  for (const req of waiting) {
    if (seen.has(req.requestId)) fail(req.requestId, 'is queued twice');
    seen.add(req.requestId);
    if (!QUEUED_STATES.has(req.lifecycle))
      fail(req.requestId, `is in the waiting queue in state ${req.lifecycle}`);
    const loading = req.status === 'WAITING_FOR_REMOTE_KVS';
    if (req.lifecycle === 'WAITING_FOR_REMOTE_KV' && !loading)
      fail(req.requestId, `waits for remote KV with status ${req.status}`);
    if (req.status !== 'WAITING' && req.status !== 'PREEMPTED' && !loading) {
      fail(req.requestId, `is in the waiting queue with status ${req.status}`);
    }
  }
  for (const req of running) {
    if (seen.has(req.requestId)) fail(req.requestId, 'is both waiting and running, or running twice');
    seen.add(req.requestId);
    if (req.lifecycle !== 'RUNNING' || req.status !== 'RUNNING') {
      fail(req.requestId, `is in the running list in state ${req.lifecycle} / ${req.status}`);
    }
  }
  const inUse = new Set<number>();
  for (const [id, req] of requests) {
    if (req.requestId !== id) fail(id, 'is stored under another id');
    if (req.numComputedTokens > req.numTokens)
      fail(id, `has ${req.numComputedTokens} computed of ${req.numTokens} tokens`);
    const held = heldBlockIds(kv, id);
    for (const b of held) inUse.add(b);
    if (!seen.has(id)) {
      if (req.lifecycle !== 'HANDOFF_PENDING') fail(id, `is in no queue in state ${req.lifecycle}`);
      if (!req.status.startsWith('FINISHED_')) fail(id, `is hand-off pending with status ${req.status}`);
      if (!req.pendingHandoff || (!req.pendingHandoff.recv && !req.pendingHandoff.send)) {
        fail(id, 'is hand-off pending with nothing pending');
      }
      const heldSet = new Set(held);
      for (const b of (req.handoffBlockIds ?? []).flat()) {
        if (b !== 0 && !heldSet.has(b)) fail(id, `lost block ${b} it handed to the connector`);
      }
    } else if (BLOCKLESS_STATES.has(req.lifecycle)) {
      if (held.length > 0) fail(id, `holds blocks ${held.join(',')} in state ${req.lifecycle}`);
      if (req.numComputedTokens !== 0)
        fail(id, `has ${req.numComputedTokens} computed tokens in state ${req.lifecycle}`);
    } else if (req.lifecycle === 'WAITING_FOR_REMOTE_KV' && held.length === 0) {
      fail(id, 'waits for remote KV without blocks');
    }
  }
  for (const req of recentlyFreed) {
    if (req.lifecycle !== 'FREED') fail(req.requestId, `is in the freed list in state ${req.lifecycle}`);
    if (requests.get(req.requestId) === req) fail(req.requestId, 'is freed but still owned by the scheduler');
    if (!requests.has(req.requestId) && heldBlockIds(kv, req.requestId).length > 0) {
      fail(req.requestId, 'is freed but still holds blocks');
    }
  }
  const poolInUse = kv.kvCacheConfig.numBlocks - 1 - kv.numFreeBlocks;
  if (poolInUse !== inUse.size) {
    fail('*', `the pool has ${poolInUse} blocks in use but requests hold ${inUse.size}`);
  }
}
