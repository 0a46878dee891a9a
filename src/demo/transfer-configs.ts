/**
 * The `--kv-transfer-config` of a P/D pair's prefill and decode servers (the demo's, the P/D
 * benchmark's), per connector. NIXL needs a side channel; MoRIIO needs the server's own HTTP
 * port and its handshake and notify ports (one worker each here: tp 1, dp 1, so each listens
 * exactly on its base).
 */
import { createServer, type Server } from 'node:net';
import type { KVRole } from '../config/types.ts';
import type { DemoConnector, DemoOptions } from './options.ts';

/** The demo runs one producer and one consumer. */
type KvRole = Exclude<KVRole, 'kv_both'>;

/** Where one MoRIIO engine listens (all on 127.0.0.1). */
export interface MoriioPorts {
  http: number;
  handshake: number;
  notify: number;
}

/**
 * `count` distinct ports that were free a moment ago. All are held open until every one is
 * picked, so the OS cannot hand the same port out twice.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    const ports: number[] = [];
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => resolve());
      });
      const address = server.address();
      if (address === null || typeof address === 'string') throw new Error('no port');
      ports.push(address.port);
    }
    return ports;
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }
}

/** Distinct ports for `engines` MoRIIO engines (all reserved together). */
export async function freeMoriioPorts(engines: number): Promise<MoriioPorts[]> {
  const ports = await freePorts(engines * 3);
  return Array.from({ length: engines }, (_, i) => {
    const [http = 0, handshake = 0, notify = 0] = ports.slice(i * 3, i * 3 + 3);
    return { http, handshake, notify };
  });
}

/**
 * What a config carries besides roles and ports. The demo passes its options; the P/D
 * benchmark its own. A field left out keeps the connector's default.
 */
export interface TransferConfigOptions {
  kvLoadFailurePolicy: 'recompute' | 'fail';
  /** P's hold on blocks D has not read, in seconds (NIXL kv_lease_duration, MoRIIO defer_timeout). */
  kvLeaseDuration?: number;
  /** The transfer agents in threads of their own (`transfer_thread`). */
  transferThread?: boolean;
}

export interface NixlConfigOptions extends TransferConfigOptions {
  /** NIXL's transports, e.g. ['SHM'] (`backends`). */
  nixlBackends?: readonly string[];
}

export interface MoriioConfigOptions
  extends TransferConfigOptions,
    Pick<DemoOptions, 'moriioBackend' | 'moriioReadMode'> {}

export function nixlTransferConfig(
  connector: DemoConnector,
  role: KvRole,
  engineId: string,
  sideChannelPort: number,
  options: NixlConfigOptions,
): Record<string, unknown> {
  return {
    kv_connector: connector,
    kv_role: role,
    engine_id: engineId,
    kv_load_failure_policy: options.kvLoadFailurePolicy,
    kv_connector_extra_config: {
      ...(options.nixlBackends === undefined ? {} : { backends: options.nixlBackends }),
      side_channel_port: sideChannelPort,
      ...(options.kvLeaseDuration === undefined ? {} : { kv_lease_duration: options.kvLeaseDuration }),
      ...threadField(options),
    },
  };
}

/** MoRIIO's engine id is host_ip:handshake_port (it replaces kv_transfer_config.engine_id). */
export function moriioEngineId(ports: MoriioPorts): string {
  return `127.0.0.1:${ports.handshake}`;
}

export function moriioTransferConfig(
  role: KvRole,
  ports: MoriioPorts,
  options: MoriioConfigOptions,
): Record<string, unknown> {
  return {
    kv_connector: 'MoRIIOConnector',
    kv_role: role,
    kv_load_failure_policy: options.kvLoadFailurePolicy,
    kv_connector_extra_config: {
      http_port: ports.http,
      host_ip: '127.0.0.1',
      handshake_port: ports.handshake,
      notify_port: ports.notify,
      backend: options.moriioBackend,
      read_mode: options.moriioReadMode,
      // P's hold on blocks D never wrote or read: the demo's --kv-lease-duration.
      ...(options.kvLeaseDuration === undefined ? {} : { defer_timeout: options.kvLeaseDuration }),
      ...threadField(options),
    },
  };
}

function threadField(options: TransferConfigOptions): { transfer_thread?: boolean } {
  return options.transferThread === undefined ? {} : { transfer_thread: options.transferThread };
}
