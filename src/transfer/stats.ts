/** Per-transfer statistics in the shape vLLM's NIXL stats need. */
export interface TransferStatsSnapshot {
  /** Seconds from post to completion, one entry per successful transfer. */
  readonly transferDuration: readonly number[];
  /**
   * kvconnect: the same minus the time the peer held the transfer before serving it (a READ
   * waiting for its grant, i.e. for the owner's next engine step) and the time it waited for
   * the connection to the peer to be set up (the first transfer to a peer): the time on the wire.
   */
  readonly wireDuration: readonly number[];
  /** Seconds spent inside read()/write() posting the transfer. */
  readonly postDuration: readonly number[];
  readonly bytesTransferred: readonly number[];
  readonly numDescriptors: readonly number[];
  readonly numFailedTransfers: number;
  readonly numFailedNotifications: number;
  /** kvconnect: WRITEs the same-host receiver copied itself (pulled, docs/transfer.md#pulled-writes). */
  readonly numPulledWrites: number;
}

export class TransferStats {
  #transferDuration: number[] = [];
  #wireDuration: number[] = [];
  #postDuration: number[] = [];
  #bytes: number[] = [];
  #descriptors: number[] = [];
  #failedTransfers = 0;
  #failedNotifications = 0;
  #pulledWrites = 0;

  recordSuccess(durationS: number, wireS: number, postS: number, bytes: number, descriptors: number): void {
    this.#transferDuration.push(durationS);
    this.#wireDuration.push(wireS);
    this.#postDuration.push(postS);
    this.#bytes.push(bytes);
    this.#descriptors.push(descriptors);
  }

  recordFailedTransfer(): void {
    this.#failedTransfers++;
  }

  recordFailedNotification(): void {
    this.#failedNotifications++;
  }

  recordPulledWrite(): void {
    this.#pulledWrites++;
  }

  /** Adds a snapshot taken elsewhere (the agent thread's) to this interval. */
  merge(d: TransferStatsSnapshot): void {
    for (const [i, s] of d.transferDuration.entries()) {
      this.recordSuccess(
        s,
        d.wireDuration[i] ?? s,
        d.postDuration[i] ?? 0,
        d.bytesTransferred[i] ?? 0,
        d.numDescriptors[i] ?? 0,
      );
    }
    this.#failedTransfers += d.numFailedTransfers;
    this.#failedNotifications += d.numFailedNotifications;
    this.#pulledWrites += d.numPulledWrites;
  }

  snapshot(): TransferStatsSnapshot {
    return {
      transferDuration: [...this.#transferDuration],
      wireDuration: [...this.#wireDuration],
      postDuration: [...this.#postDuration],
      bytesTransferred: [...this.#bytes],
      numDescriptors: [...this.#descriptors],
      numFailedTransfers: this.#failedTransfers,
      numFailedNotifications: this.#failedNotifications,
      numPulledWrites: this.#pulledWrites,
    };
  }

  /** Returns the snapshot and starts a new interval (what a stats collector does each step). */
  reset(): TransferStatsSnapshot {
    const s = this.snapshot();
    this.#transferDuration = [];
    this.#wireDuration = [];
    this.#postDuration = [];
    this.#bytes = [];
    this.#descriptors = [];
    this.#failedTransfers = 0;
    this.#failedNotifications = 0;
    this.#pulledWrites = 0;
    return s;
  }
}
