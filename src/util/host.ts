/** A host as it stands before `:port` in a URL or a ZMQ endpoint: an IPv6 address in brackets. */
export function bracketHost(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}
