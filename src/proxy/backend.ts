/**
 * One prefill or decode instance as the proxy sees it: its URL, health, in-flight count,
 * what it reported about its connector, and (for MoRIIO) its discovery registration.
 */
import {
  type BackendInfo,
  type MoRIIODiscoveryPing,
  type MoRIIOTransferMode,
  type MoRIIOZmqAddress,
  parseMoRIIOZmqAddress,
} from '../wire/index.ts';
import type { BackendRole } from './types.ts';

export interface Registration {
  zmqAddress: MoRIIOZmqAddress;
  dpSize: number;
  tpSize: number;
  transferMode: MoRIIOTransferMode;
  expiresAt: number;
}

export class Backend {
  readonly url: string;
  readonly role: BackendRole;
  readonly source: 'cli' | 'discovery';
  healthy: boolean;
  inFlight = 0;
  info: BackendInfo | null = null;
  /** True when the backend lacks GET /kvconnect/info (a real vLLM server) and NIXL pull is assumed. */
  infoFallback = false;
  registration: Registration | null = null;
  /** Date.now() when it last answered a proxied request (passive health). */
  answeredAt = 0;
  /** A request is trying this backend while it is marked down (src/proxy/failover.ts, prefill panic). */
  trial = false;
  #dpCursor = 0;

  constructor(url: string, role: BackendRole, source: 'cli' | 'discovery', healthy = false) {
    this.url = normaliseUrl(url);
    this.role = role;
    this.source = source;
    this.healthy = healthy;
  }

  get host(): string {
    return new URL(this.url).hostname;
  }

  get dpSize(): number {
    return this.registration?.dpSize ?? this.info?.dp_size ?? 1;
  }

  get tpSize(): number {
    return this.registration?.tpSize ?? this.info?.tp_size ?? 1;
  }

  /** The next data-parallel rank to use on this instance (round-robin over its ranks). */
  nextDpRank(): number {
    const rank = this.#dpCursor % Math.max(1, this.dpSize);
    this.#dpCursor += 1;
    return rank;
  }

  /** A ping parsed by src/wire/moriio-discovery.ts (its zmq_address is known to parse). */
  register(ping: MoRIIODiscoveryPing, ttlMs: number, now: number): void {
    this.registration = {
      zmqAddress: parseMoRIIOZmqAddress(ping.zmq_address),
      dpSize: ping.dp_size,
      tpSize: ping.tp_size,
      transferMode: ping.transfer_mode,
      expiresAt: now + ttlMs,
    };
    this.healthy = true;
  }

  describe(): Record<string, unknown> {
    return {
      url: this.url,
      role: this.role,
      source: this.source,
      healthy: this.healthy,
      in_flight: this.inFlight,
      connector: this.info?.connector ?? null,
    };
  }
}

export function normaliseUrl(url: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(url) ? url : `http://${url}`;
  const parsed = new URL(withScheme);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/+$/, '')}`;
}
