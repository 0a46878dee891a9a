/**
 * `kvconnect bench serve`: a load generator like `vllm bench serve` (TTFT, TPOT, ITL,
 * E2E, throughput; a table, a JSON file and an SVG chart).
 */
import { writeFileSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import { BENCH_SERVE_DEFAULTS, type BenchServeOptions } from '../../bench-serve/options.ts';
import { formatErrorText } from '../../errors/index.ts';

function num(name: string, min: number, integer: boolean) {
  return (value: string): number => {
    const n = value === 'inf' ? Number.POSITIVE_INFINITY : Number(value);
    if (Number.isNaN(n) || n < min || (integer && !Number.isInteger(n))) {
      throw new InvalidArgumentError(`${name} must be ${integer ? 'an integer' : 'a number'} >= ${min}.`);
    }
    return n;
  };
}

/** Adds `bench serve` (creating `bench` if another command did not already). */
export function registerBenchServeCommand(program: Command): Command {
  const bench =
    program.commands.find((c) => c.name() === 'bench') ?? program.command('bench').description('benchmarks');
  const d = BENCH_SERVE_DEFAULTS;
  return bench
    .command('serve')
    .description('Load-test an OpenAI-compatible server (kvconnect serve, kvconnect proxy or vLLM)')
    .requiredOption('--model <name>', 'model name sent in each request')
    .option('--base-url <url>', 'server URL', d.baseUrl)
    .option('--endpoint <path>', '/v1/completions or /v1/chat/completions', d.endpoint)
    .option(
      '--request-rate <r>',
      'requests per second (Poisson arrivals) or inf',
      num('--request-rate', 0, false),
      d.requestRate,
    )
    .option('--max-concurrency <n>', 'requests in flight at most', num('--max-concurrency', 1, true))
    .option('--num-prompts <n>', 'number of requests', num('--num-prompts', 1, true), d.numPrompts)
    .option(
      '--random-input-len <n>',
      'prompt length in words',
      num('--random-input-len', 1, true),
      d.randomInputLen,
    )
    .option(
      '--random-output-len <n>',
      'max_tokens per request',
      num('--random-output-len', 1, true),
      d.randomOutputLen,
    )
    .option(
      '--random-range-ratio <r>',
      'lengths uniform in [len*(1-r), len*(1+r)]',
      num('--random-range-ratio', 0, false),
      d.randomRangeRatio,
    )
    .option('--seed <n>', 'seed of the random prompts and arrivals', num('--seed', 0, true), d.seed)
    .option('--trace <path>', 'replay a Mooncake-format JSONL trace instead of random prompts')
    .option(
      '--trace-block-tokens <n>',
      'words per trace hash block (the trace uses 512)',
      num('--trace-block-tokens', 1, true),
      d.traceBlockTokens,
    )
    .option(
      '--trace-time-scale <x>',
      'multiply trace timestamps (0.1 = 10x faster)',
      num('--trace-time-scale', 0, false),
      d.traceTimeScale,
    )
    .option('--max-requests <n>', 'replay at most this many requests', num('--max-requests', 1, true))
    .option(
      '--trace-max-output-len <n>',
      'cap the trace output lengths',
      num('--trace-max-output-len', 1, true),
    )
    .option('--ignore-eos', 'send ignore_eos so every request generates max_tokens', false)
    .option('--timeout-ms <ms>', 'per-request deadline', num('--timeout-ms', 1, true), d.timeoutMs)
    .option(
      '--max-duration <s>',
      'start no request after this many seconds',
      num('--max-duration', 0, false),
      d.maxDurationS,
    )
    .option('--api-key <key>', 'sent as Authorization: Bearer')
    .option('--result-json <file>', 'write the results as JSON')
    .option('--svg <file>', 'write a TTFT/ITL histogram as SVG')
    .action(async (o: Record<string, unknown>) => {
      const options: BenchServeOptions = {
        ...d,
        model: o['model'] as string,
        baseUrl: o['baseUrl'] as string,
        endpoint: o['endpoint'] as string,
        requestRate: o['requestRate'] as number,
        maxConcurrency: o['maxConcurrency'] as number | undefined,
        numPrompts: o['numPrompts'] as number,
        randomInputLen: o['randomInputLen'] as number,
        randomOutputLen: o['randomOutputLen'] as number,
        randomRangeRatio: o['randomRangeRatio'] as number,
        seed: o['seed'] as number,
        trace: o['trace'] as string | undefined,
        traceBlockTokens: o['traceBlockTokens'] as number,
        traceTimeScale: o['traceTimeScale'] as number,
        maxRequests: o['maxRequests'] as number | undefined,
        traceMaxOutputLen: o['traceMaxOutputLen'] as number | undefined,
        ignoreEos: o['ignoreEos'] === true,
        timeoutMs: o['timeoutMs'] as number,
        maxDurationS: o['maxDuration'] as number,
        apiKey: (o['apiKey'] as string | undefined) ?? process.env['OPENAI_API_KEY'],
        resultJson: o['resultJson'] as string | undefined,
        svg: o['svg'] as string | undefined,
      };
      const { runBenchServe, formatTable, resultJson, latencySvg } = await import(
        '../../bench-serve/index.ts'
      );
      try {
        const run = await runBenchServe(options);
        console.log(formatTable(run.summary));
        if (options.resultJson)
          writeFileSync(options.resultJson, `${JSON.stringify(resultJson(run, options), null, 2)}\n`);
        if (options.svg) {
          const ok = run.results.filter((r) => r.ok);
          writeFileSync(
            options.svg,
            latencySvg(
              ok.map((r) => r.ttftMs),
              ok.flatMap((r) => r.itlMs),
            ),
          );
        }
        if (run.summary.completed === 0) process.exitCode = 1;
      } catch (e) {
        console.error(formatErrorText(e));
        process.exitCode = 2;
      }
    });
}
