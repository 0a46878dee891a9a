/**
 * The proxy's errors, each with a stable code and a hint. The HTTP status travels in
 * `details.status` so one helper can answer any of them.
 */
import { KVError } from '../errors/index.ts';

export const PROXY_BAD_REQUEST = 'PROXY_BAD_REQUEST';
export const PROXY_NO_BACKEND = 'PROXY_NO_BACKEND';
export const PROXY_UPSTREAM_UNREACHABLE = 'PROXY_UPSTREAM_UNREACHABLE';
export const PROXY_UPSTREAM_BAD_RESPONSE = 'PROXY_UPSTREAM_BAD_RESPONSE';
export const PROXY_NOT_FOUND = 'PROXY_NOT_FOUND';
export const PROXY_PUSH_COORDINATES = 'PROXY_PUSH_COORDINATES_MISSING';
export const PROXY_OPTIONS_INVALID = 'PROXY_OPTIONS_INVALID';
export const DISCOVERY_BAD_PING = 'PROXY_DISCOVERY_BAD_PING';

function withStatus(code: string, status: number, message: string, hint: string, cause?: unknown): KVError {
  return new KVError(code, message, { hint, details: { status }, ...(cause === undefined ? {} : { cause }) });
}

export function statusOf(e: KVError): number {
  const s = e.details?.['status'];
  return typeof s === 'number' ? s : 500;
}

export function badRequest(message: string): KVError {
  return withStatus(
    PROXY_BAD_REQUEST,
    400,
    message,
    'Send a JSON object body as for the OpenAI completions API, e.g. {"model": "...", "prompt": "...", "max_tokens": 16}.',
  );
}

export function noBackend(role: 'prefill' | 'decode'): KVError {
  return withStatus(
    PROXY_NO_BACKEND,
    503,
    `No healthy ${role} instance available`,
    `Start a ${role} server (or wait for it to pass GET /health), check the --${role} URLs, or let MoRIIO instances register on --discovery-port.`,
  );
}

export function upstreamUnreachable(role: 'prefill' | 'decode', url: string, cause: unknown): KVError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return withStatus(
    PROXY_UPSTREAM_UNREACHABLE,
    502,
    `The ${role} instance ${url} could not be reached: ${why}`,
    `Check that the ${role} server at ${url} is running; the proxy stops routing to it until GET /health succeeds again.`,
    cause,
  );
}

export function upstreamBadResponse(role: 'prefill' | 'decode', url: string, what: string): KVError {
  return withStatus(
    PROXY_UPSTREAM_BAD_RESPONSE,
    502,
    `The ${role} instance ${url} sent an unusable response: ${what}`,
    'The backend must speak the OpenAI/vLLM completions protocol and answer with a JSON body.',
  );
}

export function notFound(method: string, path: string): KVError {
  return withStatus(
    PROXY_NOT_FOUND,
    404,
    `No route for ${method} ${path}`,
    'The proxy serves POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /metrics, GET /health and GET /healthcheck.',
  );
}

export function pushCoordinatesMissing(url: string, missing: string[]): KVError {
  return withStatus(
    PROXY_PUSH_COORDINATES,
    500,
    `NixlPushConnector needs the prefill instance's ${missing.join(', ')}, which ${url} did not report`,
    'Pass --prefill-engine-id, --prefill-side-channel-host and --prefill-side-channel-port (and --prefill-tp-size / --prefill-pp-size), or run a kvconnect prefill server that serves GET /kvconnect/info.',
  );
}

export function optionsInvalid(message: string, hint: string): KVError {
  return new KVError(PROXY_OPTIONS_INVALID, message, { hint });
}

export function badPing(message: string): KVError {
  return withStatus(
    DISCOVERY_BAD_PING,
    400,
    `Invalid discovery ping: ${message}`,
    'POST /register a JSON object {type: "P"|"D", http_address: "ip:port", zmq_address: "host:IP,handshake:PORT,notify:PORT", dp_size, tp_size, transfer_mode: "READ"|"WRITE"}.',
  );
}
