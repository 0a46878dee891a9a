/** Starting and stopping a node:http server: listen (rejecting on EADDRINUSE etc.), report the address, close. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { bracketHost } from '../util/host.ts';

export type Listener = (req: IncomingMessage, res: ServerResponse) => void;

export interface HttpListener {
  readonly server: Server;
  readonly host: string;
  readonly port: number;
  /** http://host:port, with IPv6 hosts in brackets. */
  readonly url: string;
  /** Stops accepting; idle connections close at once, busy ones after graceMs (default 0). */
  close(graceMs?: number): Promise<void>;
}

/**
 * Idle keep-alive connections stay open this long: longer than any client here keeps one
 * idle (the proxy and Node's fetch: 4 s), so a client never sends a request on a socket the
 * server is closing at that moment (Node's default of 5 s races the proxy's reuse under load:
 * "other side closed").
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/**
 * Node advertises its idle timeout (`Keep-Alive: timeout=N`), and undici (Node's fetch) then
 * keeps an idle connection until N − 2 s, checked on a coarse timer: the client's last reuse
 * and the server's close are then a second or two apart, and an event loop that stalls that
 * long (a loaded machine) lets a request go out on a connection the server is closing — lost
 * unprocessed, a POST the client cannot retry ("fetch failed"). So keep-alive is granted
 * without the hint (as uvicorn, vLLM's server, does): clients use their own idle timeout
 * (undici: 4 s), far below the server's.
 */
function withoutKeepAliveHint(listener: Listener): Listener {
  return (req, res) => {
    const connection = req.headers.connection;
    if (req.httpVersion === '1.1' && (connection === undefined || !/\bclose\b/i.test(connection)))
      res.setHeader('connection', 'keep-alive');
    listener(req, res);
  };
}

export function createHttpServer(listener: Listener): Server {
  const server = createServer(withoutKeepAliveHint(listener));
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  // Malformed HTTP gets a 400 and the socket closes, instead of Node's silent reset on some errors.
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });
  return server;
}

export function listen(server: Server, port: number, host: string): Promise<HttpListener> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address() as AddressInfo;
      resolve({
        server,
        host: addr.address,
        port: addr.port,
        url: `http://${bracketHost(addr.address)}:${addr.port}`,
        close: (graceMs = 0) => closeServer(server, graceMs),
      });
    });
  });
}

function closeServer(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve();
      return;
    }
    server.close(() => resolve());
    server.closeIdleConnections();
    if (graceMs <= 0) server.closeAllConnections();
    else setTimeout(() => server.closeAllConnections(), graceMs).unref();
  });
}
