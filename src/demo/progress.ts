/**
 * Live progress: one line rewritten in place on a terminal, plain lines (at most one per
 * quarter of a phase) when the output is a file or a pipe.
 */

export interface ProgressSink {
  write(text: string): void;
  isTTY?: boolean;
}

export class Progress {
  readonly #sink: ProgressSink;
  readonly #tty: boolean;
  #lastQuarter = -1;
  #open = false;

  constructor(sink: ProgressSink) {
    this.#sink = sink;
    this.#tty = sink.isTTY === true;
  }

  /** A one-off message (a step finished, a server is up). */
  note(text: string): void {
    this.clear();
    this.#sink.write(`${text}\n`);
  }

  /** `label done/total`, with an optional detail such as the running TTFT median. */
  update(label: string, done: number, total: number, detail = ''): void {
    const line = `${label} ${bar(done, total)} ${done}/${total}${detail ? `  ${detail}` : ''}`;
    if (this.#tty) {
      this.#sink.write(`\r\x1b[2K${line}`);
      this.#open = true;
      if (done === total) this.clear();
      return;
    }
    const quarter = total > 0 ? Math.floor((4 * done) / total) : 4;
    if (done === 0) this.#lastQuarter = -1;
    if (quarter !== this.#lastQuarter) {
      this.#lastQuarter = quarter;
      this.#sink.write(`${line}\n`);
    }
  }

  /** Ends an in-place line so the next output starts on its own line. */
  clear(): void {
    if (this.#open) {
      this.#sink.write('\n');
      this.#open = false;
    }
  }
}

function bar(done: number, total: number, width = 20): string {
  const filled = total > 0 ? Math.round((width * done) / total) : width;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}
