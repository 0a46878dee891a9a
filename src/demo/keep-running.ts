/** What `--keep-running` prints: where everything listens, curl commands, how to stop. */
import type { RunningProxy } from '../proxy/proxy-server.ts';
import type { ServeProcess } from './processes.ts';

export interface KeepRunningServers {
  prefill: ServeProcess;
  decode: ServeProcess;
  reference: ServeProcess;
  proxy: RunningProxy;
}

function curlCompletion(url: string, body: Record<string, unknown>): string {
  return `curl -s ${url}/v1/completions -H 'content-type: application/json' -d '${JSON.stringify(body)}'`;
}

/** The lines that show one leg or one figure by hand; they differ between NIXL and MoRIIO. */
function connectorLines(
  s: KeepRunningServers,
  completion: Record<string, unknown>,
  moriio: boolean,
): string[] {
  if (moriio) {
    return [
      '  # how the proxy addresses P and D: MoRIIO zmq address (host, handshake, notify ports) and mode',
      `  curl -s ${s.prefill.url}/kvconnect/info`,
      '  # the plain reference server: the same answer, computed by one server',
      `  ${curlCompletion(s.reference.url, completion)}`,
      '  # KV transfer metrics: P records them in WRITE mode (it posts the writes), D in READ mode',
      `  curl -s ${s.prefill.url}/metrics | grep -E 'moriio_bytes_transferred_sum|moriio_num_failed'`,
      `  curl -s ${s.decode.url}/metrics | grep -E 'moriio_bytes_transferred_sum|external_prefix_cache_hits'`,
    ];
  }
  return [
    '  # the prefill leg by hand: P keeps the KV (until D reads it or the lease ends) and returns kv_transfer_params',
    `  ${curlCompletion(s.prefill.url, { ...completion, max_tokens: 1, kv_transfer_params: { do_remote_decode: true } })}`,
    '  # the plain reference server: the same answer, computed by one server',
    `  ${curlCompletion(s.reference.url, completion)}`,
    `  # KV transfer metrics of D and P`,
    `  curl -s ${s.decode.url}/metrics | grep -E 'nixl_bytes_transferred_sum|external_prefix_cache_hits'`,
    `  curl -s ${s.prefill.url}/metrics | grep -E 'kv_cache_usage_perc|prompt_tokens_total'`,
  ];
}

export function keepRunningHelp(
  s: KeepRunningServers,
  model: string,
  demoPid: number,
  moriio = false,
): string {
  const chat = JSON.stringify({
    model,
    messages: [{ role: 'user', content: 'Hello!' }],
    max_tokens: 16,
    stream: true,
  });
  const completion = { model, prompt: 'The quick brown fox', max_tokens: 16, temperature: 0 };
  return [
    'The servers stay up (--keep-running):',
    `  proxy      ${s.proxy.url}`,
    `  prefill    ${s.prefill.url}   (pid ${s.prefill.pid})`,
    `  decode     ${s.decode.url}   (pid ${s.decode.pid})`,
    `  reference  ${s.reference.url}   (pid ${s.reference.pid})`,
    '',
    'Try them:',
    '  # a disaggregated completion through the proxy (P prefills, D decodes)',
    `  ${curlCompletion(s.proxy.url, completion)}`,
    '  # a streamed chat through the proxy',
    `  curl -sN ${s.proxy.url}/v1/chat/completions -H 'content-type: application/json' -d '${chat}'`,
    ...connectorLines(s, completion, moriio),
    '',
    `Stop everything with Ctrl-C here, or: kill ${demoPid}`,
  ].join('\n');
}
