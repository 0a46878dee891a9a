/**
 * The OffloadingConnector's per-request `kv_transfer_params`
 * (docs/connectors/offloading.md#per-request-kv_transfer_params), read as vLLM reads them:
 * a bad value is a warning and the default, never a failed request.
 * - `max_offload_tokens`: store at most the request's first N tokens (0: store nothing).
 * - `kv_load_tiers`: which secondary tiers a load may come from, as a list of matchers
 *   `{"medium": "STORAGE", "locality": "LOCAL"}`; the CPU tier is always used.
 * - the p2p tier's roles (`remote_decoder`, `remote_prefiller`, `remote_kv_source`): the
 *   server refuses a bad combination with a 400; one that reaches the engine otherwise
 *   (an embedding caller) is a warning and no p2p role.
 */
import type { KVTransferParams } from '../../connector/types.ts';
import { getLogger } from '../../logging/logger.ts';
import { invalidP2PParams, type P2PRoles, readP2PRoles } from '../../wire/index.ts';
import type { TierLocality } from './tier-config.ts';

const log = getLogger('kvconnect.connectors.offloading.request-params');

export type TierMedium = 'CPU' | 'STORAGE';

/** What a load filter can see of a secondary tier. */
export interface TierTraits {
  medium: TierMedium;
  locality: TierLocality | null;
}

interface TierMatcher {
  medium: TierMedium | null;
  locality: TierLocality | null;
}

/** vLLM's TierFilter: `null` matchers = every tier. */
export class LoadTierFilter {
  static readonly ALL = new LoadTierFilter(null);
  readonly matchers: readonly TierMatcher[] | null;

  constructor(matchers: readonly TierMatcher[] | null) {
    this.matchers = matchers;
  }

  /** A matcher field that is unset, or a tier trait that is unset, matches anything. */
  allows(tier: TierTraits): boolean {
    if (this.matchers === null) return true;
    return this.matchers.some(
      (m) =>
        (m.medium === null || m.medium === tier.medium) &&
        (m.locality === null || tier.locality === null || m.locality === tier.locality),
    );
  }
}

const MEDIUMS: readonly TierMedium[] = ['CPU', 'STORAGE'];
const LOCALITIES: readonly TierLocality[] = ['LOCAL', 'REMOTE'];

/** A matcher's field: null when unset, undefined (with a warning) when not one of `allowed` in any case. */
function matcherField<T extends string>(
  entry: Record<string, unknown>,
  field: string,
  allowed: readonly T[],
  requestId: string,
): T | null | undefined {
  const raw = entry[field];
  if (raw === undefined || raw === null) return null;
  const up = typeof raw === 'string' ? (raw.toUpperCase() as T) : undefined;
  if (up !== undefined && allowed.includes(up)) return up;
  log.warn(
    'request %s: kv_load_tiers: unknown %s %s; skipping the entry',
    requestId,
    field,
    JSON.stringify(raw),
  );
  return undefined;
}

/**
 * `kv_load_tiers`: not a list → every tier (warning); entries that are not objects or name
 * an unknown medium/locality are skipped (warning); `[]` → no secondary tier; a list whose
 * every entry was skipped → every tier.
 */
export function parseLoadTierFilter(raw: unknown, requestId: string): LoadTierFilter {
  if (raw === undefined || raw === null) return LoadTierFilter.ALL;
  if (!Array.isArray(raw)) {
    log.warn(
      'request %s: kv_load_tiers must be a list of tier matchers, got %s; every tier is used',
      requestId,
      typeof raw,
    );
    return LoadTierFilter.ALL;
  }
  const matchers: TierMatcher[] = [];
  for (const entry of raw) {
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
      log.warn('request %s: a kv_load_tiers entry is not an object; skipping it', requestId);
      continue;
    }
    const e = entry as Record<string, unknown>;
    const medium = matcherField(e, 'medium', MEDIUMS, requestId);
    const locality = matcherField(e, 'locality', LOCALITIES, requestId);
    if (medium === undefined || locality === undefined) continue;
    matchers.push({ medium, locality });
  }
  if (matchers.length === 0) return raw.length === 0 ? new LoadTierFilter([]) : LoadTierFilter.ALL;
  return new LoadTierFilter(matchers);
}

/** `max_offload_tokens`: a non-negative integer caps the stored tokens; anything else (warning) is no cap. */
export function parseMaxOffloadTokens(raw: unknown, requestId: string): number | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === 'number' && Number.isInteger(raw) && raw >= 0) return raw;
  log.warn(
    'request %s: max_offload_tokens must be a non-negative integer, got %s; offloading without a cap',
    requestId,
    JSON.stringify(raw),
  );
  return null;
}

/** The offload settings of one request. */
export interface OffloadRequestParams {
  maxOffloadTokens: number | null;
  loadTierFilter: LoadTierFilter;
  p2p: P2PRoles | null;
}

/** The request's p2p roles, or null (none, or refused with a warning). */
export function parseP2PRoles(params: KVTransferParams | null, requestId: string): P2PRoles | null {
  if (!params) return null;
  const bad = invalidP2PParams(params);
  if (bad) {
    log.warn(
      'request %s: kv_transfer_params.%s: expected %s, received %s; the p2p tier ignores the request (%s)',
      requestId,
      bad.key,
      bad.expected,
      JSON.stringify(bad.received),
      bad.hint,
    );
    return null;
  }
  return readP2PRoles(params);
}

export function offloadRequestParams(
  params: KVTransferParams | null,
  requestId: string,
): OffloadRequestParams {
  const p = (params ?? {}) as Record<string, unknown>;
  return {
    maxOffloadTokens: parseMaxOffloadTokens(p['max_offload_tokens'], requestId),
    loadTierFilter: parseLoadTierFilter(p['kv_load_tiers'], requestId),
    p2p: parseP2PRoles(params, requestId),
  };
}
