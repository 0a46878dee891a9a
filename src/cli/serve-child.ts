/**
 * Entry of the `kvconnect serve` processes the demo starts. It is `kvconnect serve` plus a
 * watchdog: stdin is a pipe from the demo, so when the demo dies (even by SIGKILL) stdin
 * ends and the server shuts down instead of being orphaned. The demo runs this file as a
 * program (by path, like the `kvconnect` binary); nothing imports it.
 */
import { runCli } from './program.ts';

const GRACE_MS = 5000;

function parentGone(): void {
  process.kill(process.pid, 'SIGTERM');
  setTimeout(() => process.exit(1), GRACE_MS).unref();
}

process.stdin.on('end', parentGone);
process.stdin.on('error', parentGone);
process.stdin.resume();

const code = await runCli(['serve', ...process.argv.slice(2)]);
process.exit(code);
