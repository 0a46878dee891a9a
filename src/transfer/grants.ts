/**
 * Grants: the local owner's permission for a peer to READ (or WRITE) given blocks. The NIXL
 * connector grants a request's blocks to its consumer and revokes them when they are freed
 * or the lease expires; a transfer is served only if one live grant covers all its blocks.
 */
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

export class GrantTable {
  readonly #grants = new Map<string, Grant>();

  add(kind: GrantKind, key: string, spec: GrantSpec): void {
    this.#grants.set(`${kind}:${key}`, {
      kind,
      peer: spec.peer ?? '*',
      blocks: new Set(spec.blockIds),
      regions: spec.regions === undefined ? null : new Set(spec.regions),
      expiresAt: spec.expiresAt ?? Number.POSITIVE_INFINITY,
    });
  }

  revoke(kind: GrantKind, key: string): boolean {
    return this.#grants.delete(`${kind}:${key}`);
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

  /**
   * Null when a grant (the named one, or any when key is undefined) covers every run for
   * this requester now; otherwise the reason for refusing.
   */
  check(
    kind: GrantKind,
    requester: GrantRequester,
    runs: readonly GrantRun[],
    key: string | undefined,
    now = Date.now(),
  ): string | null {
    this.#dropExpired(now);
    if (key !== undefined) {
      const g = this.#grants.get(`${kind}:${key}`);
      if (!g) return `no live ${kind} grant '${key}'`;
      return covers(g, requester, runs) ? null : `${kind} grant '${key}' does not cover the requested blocks`;
    }
    for (const g of this.#grants.values()) {
      if (g.kind === kind && covers(g, requester, runs)) return null;
    }
    return `no live ${kind} grant covers the requested blocks`;
  }

  #dropExpired(now: number): void {
    for (const [k, g] of this.#grants) if (g.expiresAt <= now) this.#grants.delete(k);
  }
}

function covers(g: Grant, who: GrantRequester, runs: readonly GrantRun[]): boolean {
  if (g.peer !== '*' && g.peer !== who.agentName && g.peer !== who.engineId) return false;
  for (const r of runs) {
    if (g.regions && !g.regions.has(r.region)) return false;
    for (let b = r.first; b < r.first + r.count; b++) if (!g.blocks.has(b)) return false;
  }
  return true;
}
