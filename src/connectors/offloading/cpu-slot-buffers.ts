/**
 * The CPU tier's bytes (worker side): fixed-size slots, each allocated on first write so a
 * large cpu_bytes_to_use costs memory only as it fills.
 */
export class CpuSlotBuffers {
  readonly numSlots: number;
  readonly slotBytes: number;
  readonly #slots: (Buffer | undefined)[];
  readonly #lengths: number[];

  constructor(numSlots: number, slotBytes: number) {
    this.numSlots = numSlots;
    this.slotBytes = slotBytes;
    this.#slots = new Array<Buffer | undefined>(numSlots);
    this.#lengths = new Array<number>(numSlots).fill(0);
  }

  /** The slot's buffer for writing (full slotBytes); remember to call setLength. */
  writable(slot: number): Buffer {
    this.#check(slot);
    let buf = this.#slots[slot];
    if (!buf) {
      buf = Buffer.allocUnsafe(this.slotBytes);
      this.#slots[slot] = buf;
    }
    return buf;
  }

  setLength(slot: number, length: number): void {
    this.#check(slot);
    this.#lengths[slot] = length;
  }

  /** The slot's valid bytes (a view), or null if never written. */
  read(slot: number): Buffer | null {
    this.#check(slot);
    const buf = this.#slots[slot];
    return buf ? buf.subarray(0, this.#lengths[slot]) : null;
  }

  write(slot: number, value: Uint8Array): void {
    if (value.byteLength > this.slotBytes) {
      throw new RangeError(`value of ${value.byteLength} bytes exceeds the ${this.slotBytes}-byte CPU slot`);
    }
    this.writable(slot).set(value, 0);
    this.setLength(slot, value.byteLength);
  }

  release(slot: number): void {
    this.#check(slot);
    this.#slots[slot] = undefined;
    this.#lengths[slot] = 0;
  }

  get allocatedBytes(): number {
    let n = 0;
    for (const b of this.#slots) if (b) n += b.byteLength;
    return n;
  }

  #check(slot: number): void {
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.numSlots) {
      throw new RangeError(`CPU slot ${slot} out of range 0..${this.numSlots - 1}`);
    }
  }
}
