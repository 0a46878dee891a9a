/**
 * The vLLM release whose OpenAI server, metrics and KV events kvconnect's server follows.
 * GET /version answers it as `version` (what vLLM's clients read) beside kvconnect's own.
 */
export const REFERENCE_VLLM_VERSION = '0.32.0';
