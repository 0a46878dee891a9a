/** Public API of the engine: the offline LLM, the AsyncEngine used by the server, and the Engine itself. */
export type * from './api.ts';
export { AsyncEngine, IDLE_STEP_INTERVAL_MS } from './async-engine.ts';
export { Engine, type StepResult } from './engine.ts';
export { type GenerateOptions, LLM, type LLMOptions, type PromptInput, type RequestOutput } from './llm.ts';
export { SharedMemoryAllReduce } from './runner/all-reduce.ts';
export type { ModelExecutor } from './runner/executor.ts';
export { ModelRunner, type TokenSampler } from './runner/model-runner.ts';
export type { ModelRunnerOutput, RunnerInput } from './runner-io.ts';
export { DEFAULT_SAMPLING_PARAMS, rejectedKvTransferRequest, samplingParams } from './sampling-params.ts';
