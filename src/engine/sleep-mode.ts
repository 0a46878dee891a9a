/**
 * vLLM's sleep mode as an engine state: `sleep(level, mode)` pauses generation and discards
 * the KV cache (level 1 also offloads the weights, level 2 discards them), `wake_up(tags)`
 * brings back the named parts (`weights`, `kv_cache`; none = all) and the engine runs again
 * once every part is back. In-flight requests follow the pause mode: `abort` finishes them
 * with finish_reason "abort", `wait` lets them finish first, `keep` freezes them and they
 * resume (recomputing their KV) after waking. Requests that arrive while the engine pauses
 * or sleeps wait until it wakes.
 */

export type SleepLevel = 1 | 2;
export type PauseMode = 'abort' | 'wait' | 'keep';
export type SleepTag = 'weights' | 'kv_cache';

export const SLEEP_TAGS: readonly SleepTag[] = ['weights', 'kv_cache'];
export const PAUSE_MODES: readonly PauseMode[] = ['abort', 'wait', 'keep'];

/** The engine's sleep state as vllm:engine_sleep_state reports it. */
export interface SleepState {
  /** 0 awake, 1 weights offloaded, 2 everything discarded. */
  level: 0 | SleepLevel;
  /** Parts still asleep (empty when awake). */
  asleep: readonly SleepTag[];
}

export const AWAKE: SleepState = { level: 0, asleep: [] };

/** Parts that stay asleep after waking `tags` (all of them when tags is null). */
export function afterWake(state: SleepState, tags: readonly SleepTag[] | null): SleepState {
  const asleep = tags === null ? [] : state.asleep.filter((t) => !tags.includes(t));
  return asleep.length === 0 ? AWAKE : { level: state.level, asleep };
}
