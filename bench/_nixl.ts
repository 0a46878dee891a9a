/**
 * The `--kv-transfer-config` of a bench's NIXL pull pair: NixlConnector over the TCP
 * backend with an OS-chosen side-channel port, so several pairs run side by side.
 */
export function nixlTcpTransferConfig(role: 'kv_producer' | 'kv_consumer', engineId: string): string {
  return JSON.stringify({
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: engineId,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  });
}
