/** Scheduler → worker payload of ExampleConnector (plain data). */

/** Copy stored blocks `firstBlock ..` of the prompt `key` into `blockIds`. */
export interface ExampleLoadJob {
  reqId: string;
  key: string;
  firstBlock: number;
  blockIds: number[];
}

/** Store the first `blockIds.length` blocks of a prompt (its KV is complete this step). */
export interface ExampleSaveJob {
  reqId: string;
  key: string;
  blockIds: number[];
}

export interface ExampleConnectorMetadata {
  [key: string]: unknown;
  loads: ExampleLoadJob[];
  saves: ExampleSaveJob[];
}

export function emptyExampleMetadata(): ExampleConnectorMetadata {
  return { loads: [], saves: [] };
}
