/** `kvconnect check-config`: validate a connector configuration and print what it resolves to. */
import type { Command } from 'commander';
import type { CliContext } from '../context.ts';
import { EXIT_OK, EXIT_USAGE } from '../context.ts';
import { addEngineOptions, engineOptionsFromCommander } from '../engine-flags.ts';

export function registerCheckConfig(program: Command, ctx: CliContext): void {
  const cmd = program
    .command('check-config')
    .description(
      "Validate --kv-transfer-config (fields, connector name or module, the connector's kv_connector_extra_config, the HMA rule for the model) and print what it resolves to. Exit 0 when valid, 2 otherwise.",
    )
    .option(
      '--kv-transfer-config <json>',
      'the transfer config as JSON (vLLM syntax; bare 8G-style numbers allowed)',
    )
    .option('--json', 'print the report as JSON');
  addEngineOptions(cmd);
  cmd.addHelpText(
    'after',
    `
Dotted form (merged over the JSON): --kv-transfer-config.<key>[.<subkey>...] VALUE
  VALUE is JSON, else a human-readable integer (8G), else a string; a trailing + on the key
  makes a comma-separated list: --kv-transfer-config.kv_connector_extra_config.backends+ UCX,TCP

Examples:
  kvconnect check-config --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
  kvconnect check-config --kv-transfer-config.kv_connector MoRIIOConnector --kv-transfer-config.kv_role kv_consumer \\
      --kv-transfer-config.kv_connector_extra_config.http_port 8000 --kv-transfer-config.kv_connector_extra_config.backend xgmi
  kvconnect check-config --model tiny-hybrid --disable-hybrid-kv-cache-manager \\
      --kv-transfer-config '{"kv_connector":"ExampleConnector","kv_role":"kv_both"}'`,
  );
  cmd.action(async (opts: Record<string, unknown>) => {
    const { formatErrorText } = await import('../../errors/format.ts');
    const { formatCheckConfigReport, runCheckConfig } = await import('../check-config-run.ts');
    try {
      const report = await runCheckConfig({
        kvTransferConfigJson: opts['kvTransferConfig'] as string | undefined,
        dotted: ctx.dottedKvTransferConfig,
        engineOptions: engineOptionsFromCommander(opts),
      });
      ctx.io.out(opts['json'] ? `${JSON.stringify(report, null, 2)}\n` : formatCheckConfigReport(report));
      ctx.exitCode = EXIT_OK;
    } catch (e) {
      if (opts['json']) {
        const { formatErrorJson } = await import('../../errors/format.ts');
        ctx.io.out(`${JSON.stringify({ valid: false, ...formatErrorJson(e) }, null, 2)}\n`);
      }
      ctx.io.err(`${formatErrorText(e)}\n`);
      ctx.exitCode = EXIT_USAGE;
    }
  });
}
