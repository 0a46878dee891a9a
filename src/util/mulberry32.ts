/**
 * mulberry32: a tiny, fast, seeded 32-bit generator returning floats in [0, 1). Used where a
 * seed must reproduce a synthetic workload or synthetic KV values; not for cryptography (and
 * not the engine's sampling generator, engine/model/prng.ts's SeededRandom).
 * A leaf module with no imports, so every layer may use it.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
