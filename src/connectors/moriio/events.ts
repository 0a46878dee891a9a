/**
 * Timing events of MoRIIO transfers in this thread (benchmarks, tools): when a producer
 * first pushed a layer, and when a consumer had all of a request's KV.
 */
export type MoRIIOEventKind = 'first_layer_written' | 'write_complete' | 'recv_complete' | 'reads_complete';

export interface MoRIIOEvent {
  readonly kind: MoRIIOEventKind;
  readonly transferId: string;
  /** performance.timeOrigin + performance.now(): comparable across processes of one host. */
  readonly at: number;
}

const listeners = new Set<(e: MoRIIOEvent) => void>();

export function onMoRIIOEvent(listener: (e: MoRIIOEvent) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function emitMoRIIOEvent(kind: MoRIIOEventKind, transferId: string): void {
  if (listeners.size === 0) return;
  const e = { kind, transferId, at: performance.timeOrigin + performance.now() };
  for (const l of listeners) l(e);
}
