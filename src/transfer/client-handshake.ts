/**
 * The initiating side of the agent handshake (the serving side is in inbound.ts):
 *
 *   server → challenge {nonce, auth}
 *   client → hello {agent, engine, nonce, transport, proof?, ring?, kv?}
 *   server → welcome {agent, proof?, ring?, kv?, mapped?}
 *   client → ready {mapped?}                      (shm only)
 *
 * Both sides prove the shared secret (when one is set) with an HMAC over both nonces. Over
 * shm each side names its staging ring and offers its mappable KV regions; each maps what
 * the other offered and says which regions it mapped. Sends on the link wait until this
 * completes; it fails the connection after `timeoutMs`.
 */

import type { AgentCore } from './agent-core.ts';
import { authProof, newNonce, verifyProof } from './auth.ts';
import { kvOffer, mapPeerOffer } from './kv-offer.ts';
import type { AgentFrame } from './messages.ts';
import type { PeerLink } from './peer-link.ts';
import { ProtocolError } from './protocol-error.ts';
import { checkRingPath, ShmRingReader, ShmRingWriter } from './shm-ring.ts';

export class ClientHandshake {
  readonly #core: AgentCore;
  readonly #link: PeerLink;
  readonly #nonce = newNonce();
  readonly ready: Promise<void>;
  #resolve!: () => void;
  #reject!: (e: Error) => void;
  #serverNonce = '';
  #done = false;
  readonly #timer: NodeJS.Timeout;

  constructor(core: AgentCore, link: PeerLink, remoteName: string, timeoutMs: number) {
    this.#core = core;
    this.#link = link;
    this.ready = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.ready.catch(() => {});
    if (link.transport === 'shm') link.ringOut = new ShmRingWriter(core.shmDir, core.ringBytes);
    link.gate(this.ready);
    this.#timer = setTimeout(() => link.conn.close(`handshake with ${remoteName} timed out`), timeoutMs);
    this.#timer.unref();
    link.conn.onClose((reason) => this.#fail(reason));
  }

  /** True once the peer's welcome was verified: later frames belong to the transfer protocol. */
  get done(): boolean {
    return this.#done;
  }

  /** Handles a frame that arrived before the handshake completed. */
  onFrame(f: AgentFrame): void {
    switch (f.type) {
      case 'challenge':
        this.#onChallenge(f.nonce, f.auth);
        return;
      case 'welcome':
        this.#onWelcome(f);
        return;
      case 'error':
        throw new ProtocolError(f.reason);
      default:
        throw new ProtocolError(`'${f.type}' before the handshake`);
    }
  }

  #onChallenge(serverNonce: string, serverAuthenticates: boolean): void {
    const core = this.#core;
    const link = this.#link;
    this.#serverNonce = serverNonce;
    const secret = core.secret;
    if (secret !== undefined && !serverAuthenticates) {
      throw new ProtocolError('peer does not authenticate but a shared secret is configured here');
    }
    const offer = kvOffer(core, link);
    link.conn.send({
      type: 'hello',
      agent: core.agentName,
      engine: core.engineId,
      nonce: this.#nonce,
      transport: link.transport,
      ...(secret === undefined ? {} : { proof: authProof(secret, 'client', serverNonce, this.#nonce) }),
      ...(link.ringOut ? { ring: link.ringOut.path } : {}),
      ...offer,
    });
  }

  #onWelcome(f: Extract<AgentFrame, { type: 'welcome' }>): void {
    const secret = this.#core.secret;
    if (secret !== undefined && !verifyProof(secret, 'server', this.#serverNonce, this.#nonce, f.proof)) {
      throw new ProtocolError('peer failed authentication (shared secret mismatch)');
    }
    const link = this.#link;
    if (link.transport === 'shm') {
      link.ringIn = new ShmRingReader(checkRingPath(f.ring, this.#core.shmDir));
      link.ringOut?.unlink();
      link.mappedByPeer = new Set(f.mapped ?? []);
      link.peerPulls = f.pulls === true;
      mapPeerOffer(link, f);
      const mapped = link.peerKv?.regions;
      link.conn.send({ type: 'ready', ...(mapped ? { mapped } : {}) });
    }
    this.#done = true;
    clearTimeout(this.#timer);
    this.#resolve();
  }

  #fail(reason: string): void {
    clearTimeout(this.#timer);
    this.#reject(new Error(reason));
  }
}
