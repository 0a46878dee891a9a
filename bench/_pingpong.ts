/**
 * The floor under a one-block transfer over tcp from Node.js: a bare request/reply between this
 * process and a child over loopback TCP, a 16-byte request answered with `replyBytes` (the
 * reply read straight into one buffer, as the agent reads a payload), no framing, no checks,
 * no hashing. With a busy-poll window both loops keep turning after each message as the
 * agents do (src/transfer/busy-poll.ts); with 0 they sleep between messages.
 * `npm run bench -- transfer` times it beside kvconnect's one-block READ.
 * Run as a script (`node --import tsx bench/_pingpong.ts <replyBytes> <busyPollUs>`), this file is the child.
 */
import { spawn } from 'node:child_process';
import { connect, createServer, type Socket } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { BusyPoll } from '../src/transfer/busy-poll.ts';

const SELF = fileURLToPath(import.meta.url);
const REQUEST_BYTES = 16;

export interface PingPong {
  /** Microseconds of each of `n` round trips, one after the other. */
  time(n: number): Promise<number[]>;
  stop(): Promise<void>;
}

/** Starts the child and connects; `warmup` round trips run before it returns (not timed). */
export async function startPingPong(
  replyBytes: number,
  busyPollUs: number,
  warmup = 2000,
): Promise<PingPong> {
  const child = spawn(process.execPath, ['--import', 'tsx', SELF, String(replyBytes), String(busyPollUs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const port = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (l) => resolve(Number(l)));
    void exited.then(() => reject(new Error('the ping-pong child exited')));
  });
  const poll = new BusyPoll(busyPollUs);
  const reply = new Uint8Array(replyBytes);
  let got = 0;
  let done: (() => void) | null = null;
  const socket = connect({
    host: '127.0.0.1',
    port,
    onread: {
      buffer: () => reply.subarray(got),
      callback: (n: number) => {
        poll.touch();
        got += n;
        if (got === replyBytes) {
          got = 0;
          done?.();
        }
        return true;
      },
    },
  });
  socket.setNoDelay(true);
  await new Promise<void>((r) => socket.once('connect', () => r()));
  const request = Buffer.alloc(REQUEST_BYTES);
  const once = async (): Promise<number> => {
    const t0 = performance.now();
    const answered = new Promise<void>((r) => (done = r));
    socket.write(request);
    poll.touch();
    await answered;
    return (performance.now() - t0) * 1000;
  };
  for (let i = 0; i < warmup; i++) await once();
  return {
    time: async (n) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push(await once());
      return out;
    },
    stop: async () => {
      poll.stop();
      socket.destroy();
      child.kill();
      await exited;
    },
  };
}

/** The child: answers every REQUEST_BYTES it reads with `replyBytes` bytes. */
function serve(replyBytes: number, busyPollUs: number): void {
  const poll = new BusyPoll(busyPollUs);
  const reply = Buffer.alloc(replyBytes, 7);
  const server = createServer((s: Socket) => {
    s.setNoDelay(true);
    let pending = 0;
    s.on('data', (chunk: Buffer) => {
      poll.touch();
      pending += chunk.length;
      for (; pending >= REQUEST_BYTES; pending -= REQUEST_BYTES) s.write(reply);
    });
    s.on('close', () => {
      poll.stop();
      server.close();
    });
  });
  server.listen(0, '127.0.0.1', () => {
    const addr = server.address();
    process.stdout.write(`${typeof addr === 'object' && addr ? addr.port : 0}\n`);
  });
}

if (process.argv[1] === SELF) serve(Number(process.argv[2]), Number(process.argv[3]));
