/**
 * Grants: the local owner's permission for a peer to READ (or WRITE) given blocks. The NIXL
 * connector grants a request's blocks to its consumer and revokes them when they are freed
 * or the lease expires; a transfer is served only if one live grant covers all its blocks.
 * A READ naming a grant that does not exist yet (the owner creates it a moment after telling
 * the peer to read) waits a bounded time for it; one naming a grant that ended is refused.
 */
import type { TransferFailure } from './failure.ts';

export type GrantKind = 'read' | 'write';

export interface GrantSpec {
  /** Engine id or agent name of the peer allowed to use it; '*' (default) = any authenticated peer. */
  readonly peer?: string;
  /** Block ids covered, in every listed region. */
  readonly blockIds: Iterable<number>;
  /** Region ids covered; omitted = every registered region. */
  readonly regions?: Iterable<number>;
  /** Epoch milliseconds after which the grant is void; omitted = until revoked. */
  readonly expiresAt?: number;
}

interface Grant {
  readonly kind: GrantKind;
  readonly peer: string;
  readonly blocks: ReadonlySet<number>;
  readonly regions: ReadonlySet<number> | null;
  expiresAt: number;
}

export interface GrantRequester {
  readonly agentName: string;
  readonly engineId: string;
}

export interface GrantRun {
  readonly region: number;
  readonly first: number;
  readonly count: number;
}

/** How long, and how much, READs naming a not-yet-created grant may wait for it. */
export interface GrantWaitLimits {
  /** Longest a READ waits for its named grant to appear; 0 = refuse at once. */
  readonly waitMs: number;
  /** READs one peer may have waiting at once. */
  readonly maxPerPeer: number;
  /** Descriptors (block runs) one peer's waiting READs may hold in total. */
  readonly maxRunsPerPeer: number;
}

export const DEFAULT_GRANT_WAIT: GrantWaitLimits = { waitMs: 5000, maxPerPeer: 256, maxRunsPerPeer: 1 << 16 };

/** Keys of ended (revoked or expired) grants remembered so a late READ is refused at once. */
const ENDED_KEYS_KEPT = 1 << 16;

/** A waiting READ's outcome: null = its grant appeared and covers it; else the refusal. */
export type WaitDone = (refusal: TransferFailure | null) => void;

interface Waiter {
  readonly requester: GrantRequester;
  readonly runs: readonly GrantRun[];
  readonly done: WaitDone;
  readonly timer: NodeJS.Timeout;
}

export class GrantTable {
  readonly #grants = new Map<string, Grant>();
  /** Insertion-ordered, so the oldest ended keys are forgotten first. */
  readonly #ended = new Set<string>();
  readonly #waiters = new Map<string, Set<Waiter>>();
  readonly #parked = new Map<string, { reads: number; runs: number }>();
  readonly #revokeListeners = new Set<(kind: GrantKind) => void>();
  readonly #endListeners = new Set<(kind: GrantKind, key: string) => void>();
  readonly limits: GrantWaitLimits;
  readonly #onWaiting: ((count: number) => void) | undefined;
  #waiting = 0;

  /** `onWaiting` hears the number of waiting READs each time it changes. */
  constructor(limits: Partial<GrantWaitLimits> = {}, onWaiting?: (count: number) => void) {
    this.limits = { ...DEFAULT_GRANT_WAIT, ...limits };
    this.#onWaiting = onWaiting;
  }

  add(kind: GrantKind, key: string, spec: GrantSpec): void {
    const k = `${kind}:${key}`;
    this.#dropExpired(Date.now());
    if (this.#grants.has(k)) this.#notifyEnd(kind, key);
    this.#ended.delete(k);
    this.#grants.set(k, {
      kind,
      peer: spec.peer ?? '*',
      blocks: new Set(spec.blockIds),
      regions: spec.regions === undefined ? null : new Set(spec.regions),
      expiresAt: spec.expiresAt ?? Number.POSITIVE_INFINITY,
    });
    this.#wake(k, (w) => this.check(kind, w.requester, w.runs, key));
  }

  /** Ends a grant (or, for a key never granted, declares it dead): its READs are refused from now on. */
  revoke(kind: GrantKind, key: string): boolean {
    const k = `${kind}:${key}`;
    const existed = this.#grants.delete(k);
    if (existed) this.#notifyEnd(kind, key);
    this.#markEnded(k);
    this.#wake(k, () => ({
      cause: 'grant_ended',
      reason: `no live ${kind} grant '${key}' (revoked before it was granted)`,
    }));
    if (existed) for (const l of this.#revokeListeners) l(kind);
    return existed;
  }

  /** Calls `listener` synchronously whenever a live grant is revoked; returns the unsubscribe. */
  onRevoke(listener: (kind: GrantKind) => void): () => void {
    this.#revokeListeners.add(listener);
    return () => this.#revokeListeners.delete(listener);
  }

  /**
   * Calls `listener` synchronously whenever a grant ends: revoked, found expired, or replaced
   * by a grant of the same key. Returns the unsubscribe.
   */
  onEnd(listener: (kind: GrantKind, key: string) => void): () => void {
    this.#endListeners.add(listener);
    return () => this.#endListeners.delete(listener);
  }

  #notifyEnd(kind: GrantKind, key: string): void {
    for (const l of this.#endListeners) l(kind, key);
  }

  /** Moves the expiry of a live grant (lease renewal); false if there is no such grant. */
  renew(kind: GrantKind, key: string, expiresAt: number): boolean {
    const g = this.#grants.get(`${kind}:${key}`);
    if (!g) return false;
    g.expiresAt = expiresAt;
    return true;
  }

  get size(): number {
    return this.#grants.size;
  }

  /** READs currently waiting for a grant to appear. */
  get waiting(): number {
    return this.#waiting;
  }

  /**
   * Null when a grant (the named one, or any when key is undefined) covers every run for
   * this requester now; otherwise the refusal.
   */
  check(
    kind: GrantKind,
    requester: GrantRequester,
    runs: readonly GrantRun[],
    key: string | undefined,
    now = Date.now(),
  ): TransferFailure | null {
    this.#dropExpired(now);
    if (key !== undefined) {
      const g = this.#grants.get(`${kind}:${key}`);
      if (!g) {
        return this.#ended.has(`${kind}:${key}`)
          ? { cause: 'grant_ended', reason: `no live ${kind} grant '${key}' (it was revoked or has expired)` }
          : { cause: 'not_granted_yet', reason: `no ${kind} grant '${key}' yet` };
      }
      return covers(g, requester, runs)
        ? null
        : { cause: 'not_granted', reason: `${kind} grant '${key}' does not cover the requested blocks` };
    }
    for (const g of this.#grants.values()) {
      if (g.kind === kind && covers(g, requester, runs)) return null;
    }
    return { cause: 'not_granted', reason: `no live ${kind} grant covers the requested blocks` };
  }

  /**
   * True when a transfer naming `key` should wait for the grant instead of being refused:
   * the key has neither a live grant nor an ended one, and waiting is enabled.
   */
  awaitable(kind: GrantKind, key: string | undefined): boolean {
    if (key === undefined || this.limits.waitMs <= 0) return false;
    const k = `${kind}:${key}`;
    return !this.#grants.has(k) && !this.#ended.has(k);
  }

  /**
   * Parks a transfer until the grant `key` appears (then `done` gets the coverage check),
   * is revoked, or `waitMs` passes. Returns a cancel function, or the refusal when this
   * peer already has too many transfers waiting.
   */
  park(
    kind: GrantKind,
    key: string,
    requester: GrantRequester,
    runs: readonly GrantRun[],
    done: WaitDone,
  ): (() => void) | TransferFailure {
    const { waitMs, maxPerPeer, maxRunsPerPeer } = this.limits;
    const quota = this.#parked.get(requester.agentName) ?? { reads: 0, runs: 0 };
    if (quota.reads + 1 > maxPerPeer || quota.runs + runs.length > maxRunsPerPeer) {
      return {
        cause: 'grant_quota',
        reason: `no ${kind} grant '${key}' yet, and ${requester.agentName} already has ${quota.reads} transfers waiting for grants`,
      };
    }
    quota.reads++;
    quota.runs += runs.length;
    this.#parked.set(requester.agentName, quota);
    const k = `${kind}:${key}`;
    let set = this.#waiters.get(k);
    if (!set) {
      set = new Set();
      this.#waiters.set(k, set);
    }
    const timer = setTimeout(() => {
      if (this.#unpark(k, waiter))
        done({ cause: 'not_granted_yet', reason: `no ${kind} grant '${key}' yet (waited ${waitMs} ms)` });
    }, waitMs);
    timer.unref();
    const waiter: Waiter = { requester, runs, done, timer };
    set.add(waiter);
    this.#onWaiting?.(++this.#waiting);
    return () => {
      this.#unpark(k, waiter);
    };
  }

  /** Removes a waiter and releases its quota; false if it was already gone. */
  #unpark(k: string, w: Waiter): boolean {
    const set = this.#waiters.get(k);
    if (!set?.delete(w)) return false;
    if (set.size === 0) this.#waiters.delete(k);
    this.#onWaiting?.(--this.#waiting);
    clearTimeout(w.timer);
    const quota = this.#parked.get(w.requester.agentName);
    if (quota) {
      quota.reads--;
      quota.runs -= w.runs.length;
      if (quota.reads <= 0) this.#parked.delete(w.requester.agentName);
    }
    return true;
  }

  /** Settles every waiter of `k` with `outcome(w)`, after the caller's own work is done. */
  #wake(k: string, outcome: (w: Waiter) => TransferFailure | null): void {
    const set = this.#waiters.get(k);
    if (!set) return;
    for (const w of [...set]) {
      this.#unpark(k, w);
      queueMicrotask(() => w.done(outcome(w)));
    }
  }

  #markEnded(k: string): void {
    this.#ended.delete(k);
    this.#ended.add(k);
    if (this.#ended.size > ENDED_KEYS_KEPT) {
      const oldest = this.#ended.values().next().value;
      if (oldest !== undefined) this.#ended.delete(oldest);
    }
  }

  #dropExpired(now: number): void {
    for (const [k, g] of this.#grants) {
      if (g.expiresAt > now) continue;
      this.#grants.delete(k);
      this.#notifyEnd(g.kind, k.slice(g.kind.length + 1));
      this.#markEnded(k);
    }
  }
}

function covers(g: Grant, who: GrantRequester, runs: readonly GrantRun[]): boolean {
  if (g.peer !== '*' && g.peer !== who.agentName && g.peer !== who.engineId) return false;
  // An engine's transfer names the same runs of blocks in each of its regions: each run's
  // blocks are looked up once (a check is on every transfer's path).
  const checked = runs.length > 1 ? new Set<number>() : null;
  for (const r of runs) {
    if (g.regions && !g.regions.has(r.region)) return false;
    const run = r.first * 4294967296 + r.count;
    if (checked?.has(run)) continue;
    checked?.add(run);
    for (let b = r.first; b < r.first + r.count; b++) if (!g.blocks.has(b)) return false;
  }
  return true;
}
