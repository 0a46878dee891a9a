/** Compatibility-hash comparison used by the handshake. */
import { KVError } from '../errors/index.ts';

export function compatibilityMismatchMessage(local: string, remote: string): string {
  return (
    `NIXL compatibility hash mismatch. Local: ${local}, Remote: ${remote}. ` +
    'Prefill and decode instances have incompatible configurations. This may be due to: ' +
    'different vLLM versions, models, dtypes, KV cache layouts, attention backends, etc. ' +
    'Both instances must use identical configurations.' +
    `Disable this check using --kv-transfer-config '{"kv_connector_extra_config": {"enforce_handshake_compat": false}}'`
  );
}

/** Throws vLLM's mismatch error unless the hashes are equal (or enforcement is off). */
export function checkCompatibility(local: string, remote: string, enforce = true): void {
  if (!enforce || local === remote) return;
  throw new KVError('NIXL_COMPAT_HASH_MISMATCH', compatibilityMismatchMessage(local, remote), {
    hint: 'Start prefill and decode with the same kvconnect version, model, dtype and KV layout.',
    details: { local, remote },
  });
}
