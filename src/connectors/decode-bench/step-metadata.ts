/** Scheduler → worker payload of DecodeBenchConnector (plain data). */

/** Blocks to fill for one request, one list per KV cache group. */
export interface DecodeBenchFill {
  reqId: string;
  blockIds: number[][];
}

export interface DecodeBenchMetadata {
  [key: string]: unknown;
  fills: DecodeBenchFill[];
}
