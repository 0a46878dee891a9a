/**
 * MultiConnector's worker side: receives are the union of the children's; a request several
 * children save asynchronously is reported finished sending once, after the last of them (the
 * scheduler side sent how many extra reports to swallow).
 */
import type { KVConnectorBase } from '../../connector/base.ts';
import type { MultiConnectorMetadata } from './step-metadata.ts';

export class MultiWorker {
  /** finished_sending reports still to swallow per request. */
  readonly #extraAsyncSaves = new Map<string, number>();

  /** Takes this step's countdowns. */
  bind(meta: Partial<MultiConnectorMetadata>): void {
    for (const [id, n] of Object.entries(meta.extraAsyncSaves ?? {})) this.#extraAsyncSaves.set(id, n);
  }

  async getFinished(
    children: readonly KVConnectorBase[],
    finishedReqIds: readonly string[],
  ): Promise<{ sending: string[] | null; recving: string[] | null }> {
    const sending = new Set<string>();
    const recving = new Set<string>();
    for (const child of children) {
      const done = await child.getFinished(finishedReqIds);
      for (const id of done.recving ?? []) recving.add(id);
      for (const id of done.sending ?? []) {
        const extra = this.#extraAsyncSaves.get(id);
        if (extra === undefined) sending.add(id);
        else if (extra <= 1) this.#extraAsyncSaves.delete(id);
        else this.#extraAsyncSaves.set(id, extra - 1);
      }
    }
    return {
      sending: sending.size > 0 ? [...sending] : null,
      recving: recving.size > 0 ? [...recving] : null,
    };
  }
}
