/**
 * What `npm run bench -- pd-ttft` runs, from its list flags: the P/D pairs (a mode × a
 * transport each) and the prompt sizes, checked against the model's context. Kept apart from
 * the bench so the checks and the messages are tested without starting a server.
 */

/** How KV moves: NIXL pull (D READs) or push (P WRITEs), MoRIIO WRITE (layer by layer) or READ. */
export const PD_MODES = ['nixl-pull', 'nixl-push', 'moriio-write', 'moriio-read'] as const;
export type PdMode = (typeof PD_MODES)[number];

/** tcp between any two hosts; shm on one host (NIXL's TCP / SHM backends, MoRIIO's rdma / xgmi). */
export const PD_TRANSPORTS = ['tcp', 'shm'] as const;
export type PdTransport = (typeof PD_TRANSPORTS)[number];

export interface PdPair {
  mode: PdMode;
  transport: PdTransport;
  /** "nixl-pull/tcp". */
  label: string;
}

export interface PdTtftPlan {
  pairs: PdPair[];
  sizes: number[];
}

export type PlanResult = { ok: true; plan: PdTtftPlan } | { ok: false; problem: string };

function listOf<T extends string>(
  flag: string,
  raw: string,
  choices: readonly T[],
): { ok: true; values: T[] } | { ok: false; problem: string } {
  const values: T[] = [];
  for (const item of raw.split(',').map((s) => s.trim())) {
    if (!(choices as readonly string[]).includes(item)) {
      return {
        ok: false,
        problem: `--${flag} expects a comma-separated list of ${choices.map((c) => `'${c}'`).join(', ')}, got '${item}' in '${raw}'`,
      };
    }
    if (!values.includes(item as T)) values.push(item as T);
  }
  return { ok: true, values };
}

/**
 * The pairs (every mode × every transport, modes first) and the sizes (ascending, distinct).
 * A size must leave room for `maxTokens` within `maxModelLen`, as the server would require.
 */
export function planPdTtft(
  flags: { modes: string; transports: string; sizes: string },
  maxModelLen: number,
  maxTokens: number,
): PlanResult {
  const modes = listOf('modes', flags.modes, PD_MODES);
  if (!modes.ok) return modes;
  const transports = listOf('transports', flags.transports, PD_TRANSPORTS);
  if (!transports.ok) return transports;
  const sizes: number[] = [];
  for (const item of flags.sizes.split(',').map((s) => s.trim())) {
    const n = /^\d+$/.test(item) ? Number(item) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < 1) {
      return {
        ok: false,
        problem: `--sizes expects a comma-separated list of prompt lengths in tokens (positive integers), got '${item}' in '${flags.sizes}'`,
      };
    }
    if (n + maxTokens > maxModelLen) {
      return {
        ok: false,
        problem: `--sizes: a ${n}-token prompt plus --max-tokens ${maxTokens} exceeds the model's max_model_len ${maxModelLen} (use sizes up to ${maxModelLen - maxTokens}, or a model with a longer context)`,
      };
    }
    if (!sizes.includes(n)) sizes.push(n);
  }
  sizes.sort((a, b) => a - b);
  const pairs = modes.values.flatMap((mode) =>
    transports.values.map((transport) => ({ mode, transport, label: `${mode}/${transport}` })),
  );
  return { ok: true, plan: { pairs, sizes } };
}
