/**
 * Step 3 of updateFromOutput: append the sampled tokens, check stop conditions, finish
 * requests (requestFinished + delayed free) and build their output deltas.
 */
import type { SchedulerOutput } from '../../connector/types.ts';
import type { ModelRunnerOutput } from '../runner-io.ts';
import type { SchedulerCore } from './core.ts';
import type { EngineCoreOutput } from './types.ts';

export function processSampledTokens(
  core: SchedulerCore,
  schedulerOutput: SchedulerOutput,
  runnerOutput: ModelRunnerOutput,
  skip: ReadonlySet<string>,
): EngineCoreOutput[] {
  const outputs: EngineCoreOutput[] = [];
  runnerOutput.reqIds.forEach((id, i) => {
    const req = core.requests.get(id);
    // Finished meanwhile (abort, load failure) or rolled back for recompute: drop its tokens.
    if (req?.status !== 'RUNNING' || skip.has(id)) return;
    if ((schedulerOutput.numScheduledTokens[id] ?? 0) === 0) return;
    const sampled = runnerOutput.sampledTokenIds[i] ?? [];
    const newTokenIds: number[] = [];
    for (const token of sampled) {
      req.appendOutputToken(token);
      newTokenIds.push(token);
      const stopStatus = req.checkStop(core.options.maxModelLen);
      if (stopStatus) {
        req.status = stopStatus;
        break;
      }
    }
    if (req.numComputedTokens >= req.numPromptTokens) core.inflightPrefills.delete(req);
    if (newTokenIds.length > 0) {
      core.counters.generationTokensTotal += newTokenIds.length;
      if (req.metrics.ttftMs === null) req.metrics.ttftMs = core.now() - req.arrivalTime;
    }
    let kvTransferParams = null;
    if (req.isFinished) {
      core.removeFromQueues(req);
      kvTransferParams = core.finishRequest(req, false);
    }
    if (newTokenIds.length === 0 && !req.isFinished) return;
    const output = core.makeOutput(req, newTokenIds, kvTransferParams);
    const logprobs = runnerOutput.logprobs[i];
    if (logprobs) output.logprobs = logprobs.slice(0, newTokenIds.length);
    const top = runnerOutput.topLogprobs[i];
    if (top) output.topLogprobs = top.slice(0, newTokenIds.length);
    const promptLogprobs = runnerOutput.promptLogprobs?.[i];
    if (promptLogprobs) output.promptLogprobs = promptLogprobs;
    outputs.push(output);
  });
  return outputs;
}
