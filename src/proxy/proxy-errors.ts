/**
 * The proxy's errors, each with a stable code and a hint; the HTTP status of each code is
 * declared in src/errors/codes.ts.
 */

import { type ErrorCode, KVError } from '../errors/index.ts';
import type { BodyRules, RouterCodes } from '../http/index.ts';
import { PD_CONNECTORS } from '../wire/index.ts';

function proxyError(code: ErrorCode, message: string, hint: string, cause?: unknown): KVError {
  return new KVError(code, message, { hint, ...(cause === undefined ? {} : { cause }) });
}

export const PROXY_ROUTES: RouterCodes = {
  notFound: 'PROXY_NOT_FOUND',
  methodNotAllowed: 'PROXY_METHOD_NOT_ALLOWED',
};

export function proxyBodyRules(maxBytes: number, invalidJson: ErrorCode = 'PROXY_BAD_REQUEST'): BodyRules {
  return {
    maxBytes,
    tooLarge: 'PROXY_BODY_TOO_LARGE',
    invalidJson,
    limitHint: 'Send a shorter prompt; the proxy accepts bodies up to the size in the message.',
  };
}

export function badRequest(message: string): KVError {
  return proxyError(
    'PROXY_BAD_REQUEST',
    message,
    'Send a JSON object body as for the OpenAI completions API, e.g. {"model": "...", "prompt": "...", "max_tokens": 16}.',
  );
}

export function noBackend(role: 'prefill' | 'decode'): KVError {
  return proxyError(
    'PROXY_NO_BACKEND',
    `No healthy ${role} instance available`,
    `Start a ${role} server (or wait for it to pass GET /health), check the --${role} URLs, or let MoRIIO instances register on --discovery-port.`,
  );
}

export function upstreamUnreachable(role: 'prefill' | 'decode', url: string, cause: unknown): KVError {
  const why = cause instanceof Error ? cause.message : String(cause);
  return proxyError(
    'PROXY_UPSTREAM_UNREACHABLE',
    `The ${role} instance ${url} could not be reached: ${why}`,
    `Check that the ${role} server at ${url} is running; the proxy stops routing to it until GET /health succeeds again.`,
    cause,
  );
}

export function upstreamBadResponse(role: 'prefill' | 'decode', url: string, what: string): KVError {
  return proxyError(
    'PROXY_UPSTREAM_BAD_RESPONSE',
    `The ${role} instance ${url} sent an unusable response: ${what}`,
    'The backend must speak the OpenAI/vLLM completions protocol and answer with a JSON body.',
  );
}

export function pushCoordinatesMissing(url: string, missing: string[]): KVError {
  return proxyError(
    'PROXY_PUSH_COORDINATES_MISSING',
    `NixlPushConnector needs the prefill instance's ${missing.join(', ')}, which ${url} did not report`,
    'Pass --prefill-engine-id, --prefill-side-channel-host and --prefill-side-channel-port (and --prefill-tp-size / --prefill-pp-size), or run a kvconnect prefill server that serves GET /kvconnect/info.',
  );
}

/** The P/D connectors the proxy has a flow for, as messages list them. */
const SUPPORTED = PD_CONNECTORS.join(', ');

export function connectorUnsupported(url: string, connector: string): KVError {
  return proxyError(
    'PROXY_CONNECTOR_UNSUPPORTED',
    `The prefill instance ${url} runs ${connector}, for which the proxy has no P/D flow (supported: ${SUPPORTED})`,
    `Run the prefill and decode servers with one of ${SUPPORTED} (a MultiConnector advertises the one among its children), or pass --kv-connector to name the flow the servers speak.`,
  );
}

export function optionsInvalid(message: string, hint: string): KVError {
  return new KVError('PROXY_OPTIONS_INVALID', message, { hint });
}
