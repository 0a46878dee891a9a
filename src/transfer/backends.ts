/**
 * Backend names as vLLM users write them in kv_connector_extra_config.backends. 'UCX'
 * (vLLM's default) means "choose automatically": shm when both agents share a host, else tcp.
 */
import { KVError } from '../errors/index.ts';
import type { AgentMetadata, TransportName } from './types.ts';

export const KNOWN_BACKENDS = ['TCP', 'SHM', 'UCX'] as const;

export interface BackendChoice {
  readonly tcp: boolean;
  readonly shm: boolean;
  /** Whether shm is preferred when both peers can use it (auto or SHM listed first). */
  readonly preferShm: boolean;
}

export function resolveBackends(names: readonly string[] | undefined): BackendChoice {
  const list = names === undefined || names.length === 0 ? ['UCX'] : names;
  let tcp = false;
  let shm = false;
  let preferShm = false;
  for (const raw of list) {
    const name = String(raw).toUpperCase();
    if (name === 'UCX') {
      tcp = true;
      if (!shm) preferShm = true;
      shm = true;
    } else if (name === 'TCP') {
      tcp = true;
    } else if (name === 'SHM') {
      if (!tcp) preferShm = true;
      shm = true;
    } else {
      throw new KVError(
        'TRANSFER_UNKNOWN_BACKEND',
        `Unknown transfer backend '${raw}'. Available backends: TCP, SHM, UCX (UCX = choose automatically)`,
        {
          hint: 'Set kv_connector_extra_config.backends to a list of "TCP", "SHM" or "UCX", e.g. ["UCX"].',
          field: 'kv_connector_extra_config.backends',
          details: { backend: raw, available: [...KNOWN_BACKENDS] },
        },
      );
    }
  }
  return { tcp, shm, preferShm };
}

/** Picks the transport to reach `remote`, or throws when the two agents share none. */
export function chooseTransport(
  choice: BackendChoice,
  localHostId: string,
  remote: AgentMetadata,
): TransportName {
  const sameHost = remote.endpoints.shm !== undefined && remote.endpoints.shm.hostId === localHostId;
  if (choice.shm && sameHost && (choice.preferShm || !choice.tcp)) return 'shm';
  if (choice.tcp) return 'tcp';
  throw new KVError(
    'TRANSFER_NO_COMMON_BACKEND',
    `agent ${remote.agentName} cannot be reached: only SHM is enabled and it is on another host (or has shm disabled)`,
    { hint: 'Add "TCP" (or use "UCX") in kv_connector_extra_config.backends to reach peers on other hosts.' },
  );
}
