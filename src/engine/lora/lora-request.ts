/**
 * A request's adapter (vLLM's LoRARequest): the served name, the engine-wide integer id
 * the server assigns when the adapter is registered (1, 2, ...; never reused for another
 * name), and the directory it is read from. Plain data: it crosses into tensor-parallel
 * worker threads with the scheduler output.
 */
export interface LoRARequest {
  loraName: string;
  loraIntId: number;
  loraPath: string;
  /** Bumped when the adapter is loaded again in place (load_inplace): ranks re-read it. */
  revision?: number;
}
