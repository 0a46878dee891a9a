/**
 * Test-only entry: runs `serve` on a fresh commander program exactly as src/cli/program.ts
 * would (dotted --kv-transfer-config extracted first), then exits with the command's code.
 */
import { Command, CommanderError } from 'commander';
import { registerServeCommand } from '../../src/cli/commands/serve.ts';
import type { CliContext } from '../../src/cli/context.ts';
import { extractDottedArgs } from '../../src/config/dotted-args.ts';

const ctx: CliContext = {
  io: { out: (t) => void process.stdout.write(t), err: (t) => void process.stderr.write(t) },
  dottedKvTransferConfig: [],
  exitCode: 0,
};
const { rest, dotted } = extractDottedArgs(process.argv.slice(2), '--kv-transfer-config');
ctx.dottedKvTransferConfig = dotted;
const program = new Command('kvconnect').exitOverride();
registerServeCommand(program, ctx);
try {
  await program.parseAsync(['serve', ...rest], { from: 'user' });
} catch (e) {
  ctx.exitCode = e instanceof CommanderError && e.exitCode === 0 ? 0 : 2;
}
process.exitCode = ctx.exitCode;
