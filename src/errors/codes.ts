/**
 * Every error code kvconnect raises, with the HTTP status it maps to and what it means.
 * `KVError.code` is typed as one of these keys, so a code that is not declared here does not
 * compile. docs/errors.md is generated from this table (`npm run docs:errors`).
 *
 * Statuses: 4xx when the caller (a request, a config, a peer's input) is at fault, 5xx when
 * kvconnect or a backend failed. Errors that only reach the CLI carry the status they would
 * have if an HTTP front end surfaced them.
 */
type Entry = readonly [status: number, meaning: string];

const CATALOG = {
  config: {
    KV_CONFIG_INVALID: [400, 'A configuration field has the wrong type or value'],
    KV_CONFIG_INVALID_JSON: [400, 'A JSON-valued option is not valid JSON'],
    KV_CONFIG_UNKNOWN_KEY: [400, 'An unknown top-level kv_transfer_config field or engine option'],
    KV_ROLE_REQUIRED: [400, 'kv_connector is set but kv_role is not (vLLM message)'],
    KV_ROLE_UNSUPPORTED: [400, 'kv_role is not kv_producer, kv_consumer or kv_both (vLLM message)'],
    KV_MODEL_NOT_FOUND: [400, 'The model is neither a preset nor a directory with config.json'],
    KV_MODEL_CONFIG_INVALID: [400, "The model's config.json is not JSON, not an object, or has a bad value"],
    KV_CACHE_SIZE_MISSING: [400, 'Neither a KV cache size in bytes nor a block count was given'],
    KV_CACHE_TOO_SMALL: [400, 'The KV cache holds fewer blocks than the pool or one request needs'],
    KV_TP_MISMATCH: [400, 'The KV heads cannot be split over tensor_parallel_size'],
    KV_UNKNOWN_HASH_ALGO: [400, 'prefix_caching_hash_algo names no supported algorithm'],
    KV_MORIIO_BACKEND_INVALID: [400, "MoRIIO backend is not 'rdma' or 'xgmi' (vLLM message)"],
    KV_MORIIO_HTTP_PORT_REQUIRED: [400, 'MoRIIOConnector needs kv_connector_extra_config.http_port'],
    NIXL_BAD_EXTRA_CONFIG: [400, 'A NIXL kv_connector_extra_config key has an invalid value'],
    NIXL_BAD_SIDE_CHANNEL_PORT: [400, 'VLLM_NIXL_SIDE_CHANNEL_PORT is not a port number'],
    TRANSFER_UNKNOWN_BACKEND: [400, 'kv_connector_extra_config.backends names an unknown backend'],
    TP_SIZE_INVALID: [400, 'tensor_parallel_size does not divide the model heads'],
    KV_EVENTS_ENDPOINT_INVALID: [
      400,
      'A KV events endpoint cannot be offset by the data-parallel rank (vLLM message)',
    ],
    KV_EVENTS_ENDPOINT_FAILED: [400, 'The KV events publisher cannot bind or connect its endpoint'],
  },
  connector: {
    KV_TRANSFER_CONFIG_MISSING: [500, 'A connector was created without kv_transfer_config (vLLM message)'],
    KV_CONNECTOR_NAME_MISSING: [400, 'kv_connector is not set (vLLM message)'],
    KV_CONNECTOR_NOT_REGISTERED: [400, 'No connector of that name is registered (vLLM message)'],
    KV_CONNECTOR_UNSUPPORTED: [400, 'Unknown connector name and no module path (vLLM message)'],
    KV_CONNECTOR_ALREADY_REGISTERED: [500, 'A connector name was registered twice (vLLM message)'],
    KV_CONNECTOR_MODULE_PATH_EMPTY: [400, 'kv_connector_module_path is empty (vLLM message)'],
    KV_CONNECTOR_MODULE_NOT_FOUND: [400, 'kv_connector_module_path resolves to no module'],
    KV_CONNECTOR_MODULE_LOAD_FAILED: [400, 'The external connector module could not be imported'],
    KV_CONNECTOR_CLASS_NOT_FOUND: [400, 'The module exports no class named kv_connector (vLLM message)'],
    KV_CONNECTOR_DEPRECATED_SIGNATURE: [400, 'An external connector has the old 2-argument constructor'],
    KV_CONNECTOR_NOT_IMPLEMENTED: [400, 'A vLLM connector kvconnect does not provide'],
    KV_CONNECTOR_HMA_UNSUPPORTED: [400, 'HMA is on but the connector does not support it (vLLM message)'],
    KV_CONNECTOR_HMA_REQUIRED: [500, 'A non-HMA connector was handed several KV cache groups'],
    KV_CONNECTOR_SINGLE_GROUP_ONLY: [400, 'The connector handles one KV cache group only'],
    KV_CONNECTOR_TP_UNSUPPORTED: [400, 'The connector does not support tensor parallelism'],
    KV_CONNECTOR_FACTORY_MISSING: [500, 'A composite connector was built without KVConnectorFactory loaded'],
    KV_CONNECTOR_METADATA_UNBOUND: [500, 'A worker hook ran with no connector metadata bound'],
    KV_CONNECTOR_NOT_REGISTERED_MEMORY: [500, 'A worker hook ran before registerKvCaches'],
    KV_CONNECTOR_MATCH_INVALID: [500, 'getNumNewMatchedTokens returned more tokens than the request has'],
    KV_MULTI_CONNECTOR_HMA: [400, 'HMA with several groups needs every MultiConnector child to support it'],
    KV_MULTI_CONNECTOR_KEY_CLASH: [
      500,
      'Two MultiConnector children returned the same kv_transfer_params key',
    ],
    KV_OFFLOAD_LAYOUT: [400, 'The KV cache layout cannot be offloaded'],
    KV_OFFLOAD_TIER_UNREACHABLE: [400, 'A secondary offload tier failed its startup probe'],
  },
  kv: {
    KV_INVALID_SPEC: [400, 'A KV cache spec has a non-positive size'],
    KV_BUFFER_MISMATCH: [500, 'KV buffers do not match the KV cache config they are attached to'],
    KV_DTYPE_MISMATCH: [500, 'KV memory dtype differs from the KV cache spec'],
    KV_OUT_OF_RANGE: [500, 'A KV tensor, block or output array index is out of range'],
    KV_UNKNOWN_LAYER: [500, 'A layer name has no KV cache'],
    KV_OUT_OF_BLOCKS: [500, 'The block pool has fewer free blocks than requested'],
    KV_INVALID_ALLOCATION: [500, 'allocateSlots was called with nothing to allocate'],
    KV_MISSING_BLOCK_HASHES: [500, 'A request lacks the block hashes of its full blocks'],
    KV_MULTIPLE_GROUPS: [500, 'A single-group API was used on a hybrid KV cache'],
    KV_HASH_INPUT: [400, 'A block hash input is not a safe integer'],
  },
  engine: {
    KV_REQUEST_INVALID: [400, 'A request has neither a prompt nor prompt token ids'],
    KV_REQUEST_INVALID_LENGTH: [400, 'The prompt is empty or longer than max_model_len (vLLM message)'],
    KV_REQUEST_DUPLICATE: [400, 'A request id is already live in the engine'],
    KV_ENGINE_CLOSED: [503, 'The engine has been shut down'],
    KV_LOAD_FAILED: [500, 'Loading external KV failed and kv_load_failure_policy is fail'],
    KV_INVALID_FINISH_STATUS: [500, 'finishRequests was given a status that is not FINISHED_*'],
    KV_LIFECYCLE_VIOLATION: [500, 'A request made an illegal lifecycle transition (a scheduler bug)'],
    KV_LIFECYCLE_INVARIANT: [500, 'A scheduler invariant broke (a scheduler bug)'],
    KV_RUNNER_STATE_INVALID: [500, 'The scheduler and the model runner disagree about a request'],
    KV_WORKER_ERROR: [500, 'A tensor-parallel worker thread failed'],
    KV_LAYOUT_MISMATCH: [500, 'The KV memory does not fit the model rank'],
    ENGINE_ERROR: [500, 'The engine failed a request without a more specific code'],
    FORWARD_BATCH_INVALID: [500, 'A forward batch has a sequence outside its tokens'],
    TOKEN_ID_OUT_OF_RANGE: [400, "A token id is outside the model's vocabulary"],
    TP_ALLREDUCE_MISSING: [500, 'A tensor-parallel rank has no all-reduce hook'],
    MODEL_FILE_NOT_FOUND: [400, 'A safetensors file cannot be read'],
    MODEL_WEIGHTS_MISSING: [400, 'A tensor the model needs is missing or has the wrong shape'],
    MODEL_WEIGHTS_UNUSED: [
      400,
      'The checkpoint has a tensor the model would not use, or a redundant copy that disagrees',
    ],
    MODEL_UNSUPPORTED: [
      400,
      'config.json asks for what the decoder does not implement (model_type, RoPE scaling, activation, biases)',
    ],
    CHAT_TEMPLATE_ERROR: [400, "The model's chat template rejected the messages"],
    MODEL_OUT_OF_MEMORY: [500, 'The model needs more than 4 GiB of WebAssembly memory'],
    SAFETENSORS_INVALID: [400, 'A safetensors file is truncated or malformed'],
    TOKENIZER_INVALID: [400, 'tokenizer.json is unreadable or cannot encode the text'],
    WASM_SIMD_UNAVAILABLE: [500, 'The runtime cannot run WebAssembly SIMD'],
  },
  transfer: {
    TRANSFER_BAD_REGION: [400, 'A registered region is inconsistent (size vs blocks)'],
    TRANSFER_REGION_NOT_SHARED: [400, 'A threaded agent was given memory outside a SharedArrayBuffer'],
    TRANSFER_BAD_DESCRIPTOR_COUNT: [400, 'A transfer has no descriptors or too many'],
    TRANSFER_DESC_LENGTH_MISMATCH: [400, 'Local and remote block lists differ in length'],
    TRANSFER_BLOCK_SIZE_MISMATCH: [400, 'Local and remote regions have different block sizes'],
    TRANSFER_OUT_OF_BOUNDS: [400, 'A descriptor names an unregistered region or blocks past its end'],
    TRANSFER_UNKNOWN_AGENT: [400, 'A transfer names a remote agent that was never added'],
    TRANSFER_UNKNOWN_HANDLE: [400, 'A transfer handle is unknown or already released'],
    TRANSFER_PROTOCOL_MISMATCH: [502, 'The remote agent speaks another transfer protocol version'],
    TRANSFER_NO_COMMON_BACKEND: [502, 'No enabled transport reaches the remote agent'],
    TRANSFER_NOTIFICATION_FAILED: [502, 'A notification could not be delivered to the peer'],
    TRANSFER_PORT_IN_USE: [500, "The transfer agent's port is taken"],
    TRANSFER_CLOSED: [500, 'The transfer agent is closed'],
    TRANSFER_THREAD_FAILED: [500, 'The transfer worker thread could not start or died'],
    TRANSFER_THREAD_ERROR: [500, 'The transfer worker thread reported an error without a code'],
    SIDE_CHANNEL_PORT_IN_USE: [500, "The side channel's port is taken"],
    SIDE_CHANNEL_TIMEOUT: [504, 'The remote side channel did not answer in time'],
    SIDE_CHANNEL_FAILED: [502, 'The side-channel handshake failed'],
    NIXL_COMPAT_HASH_MISMATCH: [502, 'Peers differ in version, model, dtype or KV layout'],
  },
  nixl: {
    NIXL_BAD_ROLE: [500, 'The connector was constructed with an unknown role'],
    NIXL_HANDSHAKE_DECODE_FAILED: [502, "The peer's handshake payload cannot be decoded (vLLM message)"],
    NIXL_AGENT_METADATA_DECODE_FAILED: [502, "The peer's agent metadata cannot be decoded (vLLM message)"],
    NIXL_ENGINE_ID_MISMATCH: [502, 'The side channel belongs to another engine (vLLM message)'],
    NIXL_TP_SIZE_MISMATCH: [502, "The peer's tensor_parallel_size differs from kv_transfer_params"],
    NIXL_TP_NOT_DIVISIBLE: [400, 'One tensor-parallel size does not divide the other'],
    NIXL_TP_HEADS_UNMAPPED: [502, 'A local KV head is held by none of the remote ranks'],
    NIXL_GEOMETRY_MISMATCH: [502, 'Peers differ in model, block size or cache dtype'],
    NIXL_BLOCK_SIZE_MISMATCH: [502, "The prefill engine's block size cannot be remapped to this engine's"],
    NIXL_HETERO_TP_LAYOUT: [500, 'The KV layout does not fit a heterogeneous-TP read'],
    NIXL_HETERO_TP_PUSH_UNSUPPORTED: [400, 'NixlPushConnector needs equal tensor-parallel sizes'],
    NIXL_STAGING_TOO_SMALL: [500, 'A heterogeneous-TP read needs more staging blocks than exist'],
  },
  moriio: {
    MORIIO_MALFORMED_ADDRESS: [400, 'A zmq_address is not host:IP,handshake:PORT,notify:PORT (vLLM message)'],
    MORIIO_HANDSHAKE_FAILED: [502, 'The handshake port answered with an unexpected message (vLLM message)'],
    MORIIO_GEOMETRY_MISMATCH: [502, 'Peers differ in KV block sizes'],
    MORIIO_XGMI_REMOTE_HOST: [400, "Backend 'xgmi' was asked to reach a peer on another host"],
    MORIIO_TP_NOT_MULTIPLE: [400, 'One tensor-parallel size is not a multiple of the other'],
    MORIIO_HETERO_TP_UNSUPPORTED: [400, 'Heterogeneous TP needs replicated KV heads (vLLM message)'],
    MORIIO_NOTIFY_FAILED: [502, 'A notify message could not be delivered to the peer'],
    MORIIO_PORT_IN_USE: [500, 'A MoRIIO handshake or notify port is taken'],
  },
  lora: {
    LORA_ADAPTER_NOT_FOUND: [404, 'No PEFT adapter (adapter_config.json) at the path (vLLM message)'],
    LORA_ADAPTER_INVALID: [500, 'The adapter cannot be applied to this model (vLLM answers 500)'],
    LORA_RANK_TOO_LARGE: [500, "The adapter's rank exceeds --max-lora-rank (vLLM message)"],
    LORA_CONFIG_INVALID: [400, 'A LoRA flag (--lora-modules, --max-loras, ...) has a bad value'],
    LORA_PATH_NOT_ALLOWED: [400, 'An adapter path from a request lies outside --lora-allowed-dirs'],
    LORA_REQUEST_INVALID: [
      400,
      'A load/unload request lacks a name or path, or the name is taken (vLLM message)',
    ],
    LORA_ADAPTER_UNKNOWN: [404, 'The adapter to unload is not loaded (vLLM message)'],
  },
  server: {
    SERVER_INVALID_REQUEST: [400, 'A request body field is missing or invalid (param names it)'],
    SERVER_INVALID_JSON: [400, 'The request body is not valid JSON'],
    SERVER_INVALID_KV_TRANSFER_PARAMS: [400, 'kv_transfer_params is not an object or has invalid fields'],
    SERVER_PROMPT_TOO_LONG: [400, 'Prompt plus max_tokens exceed max_model_len'],
    SERVER_UNAUTHORIZED: [401, 'Missing or wrong API key'],
    SERVER_MODEL_NOT_FOUND: [404, 'The request names a model this server does not serve'],
    SERVER_ROUTE_NOT_FOUND: [404, 'No route for this path'],
    SERVER_TIMELINE_NOT_FOUND: [
      404,
      'No request timeline kept for this X-Request-Id (GET /kvconnect/timeline)',
    ],
    SERVER_METHOD_NOT_ALLOWED: [405, 'The path exists but not for this method'],
    SERVER_BODY_TOO_LARGE: [413, 'The request body exceeds the size limit'],
    SERVER_QUEUE_FULL: [503, 'Too many requests in flight; retry later'],
    SERVER_NOT_IMPLEMENTED: [501, 'The engine behind the server cannot do what the endpoint asks'],
    SERVER_LISTEN_FAILED: [500, 'The server cannot listen on the host and port'],
    INTERNAL_ERROR: [500, 'An unexpected error that is not a KVError (a bug)'],
    SERVER_STARTING: [503, 'GET /health/ready before --startup-duration has passed'],
    SERVER_INJECTED_RATE_LIMIT: [429, 'Injected failure rate_limit (--failure-injection-rate)'],
    SERVER_INJECTED_INVALID_API_KEY: [401, 'Injected failure invalid_api_key (--failure-injection-rate)'],
    SERVER_INJECTED_CONTEXT_LENGTH: [400, 'Injected failure context_length (--failure-injection-rate)'],
    SERVER_INJECTED_SERVER_ERROR: [503, 'Injected failure server_error (--failure-injection-rate)'],
    SERVER_INJECTED_INVALID_REQUEST: [400, 'Injected failure invalid_request (--failure-injection-rate)'],
    SERVER_INJECTED_MODEL_NOT_FOUND: [404, 'Injected failure model_not_found (--failure-injection-rate)'],
  },
  proxy: {
    PROXY_BAD_REQUEST: [400, 'The client body is not a JSON object'],
    PROXY_BODY_TOO_LARGE: [413, 'The client body exceeds the size limit'],
    PROXY_NOT_FOUND: [404, 'No route for this path'],
    PROXY_METHOD_NOT_ALLOWED: [405, 'The path exists but not for this method'],
    PROXY_NO_BACKEND: [503, 'No healthy prefill or decode instance'],
    PROXY_UPSTREAM_UNREACHABLE: [502, 'A backend could not be reached'],
    PROXY_UPSTREAM_BAD_RESPONSE: [502, 'A backend answered with an unusable body'],
    PROXY_UPSTREAM_ERROR: [502, "A backend's error body was not JSON; sent with the backend's status"],
    PROXY_PUSH_COORDINATES_MISSING: [500, "NixlPushConnector needs the prefill instance's side channel"],
    PROXY_CONNECTOR_UNSUPPORTED: [502, 'The prefill backend runs a connector the proxy has no P/D flow for'],
    PROXY_OPTIONS_INVALID: [400, 'Invalid proxy options'],
    PROXY_DISCOVERY_BAD_PING: [400, 'A MoRIIO discovery ping is malformed'],
  },
  tools: {
    DEMO_CONNECTOR_UNSUPPORTED: [400, 'The demo cannot wire up this connector'],
    DEMO_CONNECTOR_NOT_AVAILABLE: [400, 'The demo connector is not available in this build'],
    DEMO_SERVER_START_FAILED: [500, 'A demo server process did not start'],
    DEMO_REQUEST_FAILED: [502, 'A demo request failed'],
    BENCH_TRACE_UNREADABLE: [400, 'The bench trace file cannot be read'],
    BENCH_TRACE_EMPTY: [400, 'The bench trace file has no valid requests'],
    BENCH_TRACE_MODE: [400, 'bench trace was run without --simulate'],
    SIM_CAPACITY_TOO_SMALL: [400, "A simulated device cache cannot hold the trace's longest request"],
  },
} as const satisfies Record<string, Record<string, Entry>>;

export type ErrorArea = keyof typeof CATALOG;
export type ErrorCode = { [A in ErrorArea]: keyof (typeof CATALOG)[A] }[ErrorArea];

export interface ErrorCodeInfo {
  code: ErrorCode;
  area: ErrorArea;
  status: number;
  meaning: string;
}

const BY_CODE = new Map<string, ErrorCodeInfo>(
  Object.entries(CATALOG).flatMap(([area, codes]) =>
    Object.entries(codes).map(([code, [status, meaning]]): [string, ErrorCodeInfo] => [
      code,
      { code: code as ErrorCode, area: area as ErrorArea, status, meaning },
    ]),
  ),
);

/** Every declared code, in catalog order. */
export function errorCatalog(): ErrorCodeInfo[] {
  return [...BY_CODE.values()];
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && BY_CODE.has(value);
}

/** The code itself when declared, else `fallback`: for codes that crossed a thread or process as text. */
export function toErrorCode(value: unknown, fallback: ErrorCode): ErrorCode {
  return isErrorCode(value) ? value : fallback;
}

/** The declared status; 500 for a code from outside the catalog (an external connector's, in plain JS). */
export function statusOfCode(code: ErrorCode): number {
  return BY_CODE.get(code)?.status ?? 500;
}
