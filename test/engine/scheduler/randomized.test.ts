/**
 * Random arrivals, aborts, finishes and load outcomes; the lifecycle invariants are checked
 * after every schedule() and updateFromOutput(), and no block leaks once every request is
 * done and every hand-off completed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { setLogLevel } from '../../../src/logging/logger.ts';
import { createHarness, tokens } from './helpers/harness.ts';

type Mode = 'local' | 'asyncLoad' | 'syncLoad' | 'producer' | 'lookupNull';
type Action =
  | { kind: 'add'; len: number; maxTokens: number; mode: Mode; shared: boolean }
  | { kind: 'abort'; pick: number }
  | { kind: 'step'; recv: number; send: number; invalid: number | null };

const action: fc.Arbitrary<Action> = fc.oneof(
  {
    arbitrary: fc.record({
      kind: fc.constant('add' as const),
      len: fc.integer({ min: 1, max: 22 }),
      maxTokens: fc.integer({ min: 1, max: 14 }),
      mode: fc.constantFrom<Mode>('local', 'asyncLoad', 'syncLoad', 'producer', 'lookupNull'),
      shared: fc.boolean(),
    }),
    weight: 3,
  },
  { arbitrary: fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }), weight: 1 },
  {
    arbitrary: fc.record({
      kind: fc.constant('step' as const),
      recv: fc.nat(),
      send: fc.nat(),
      invalid: fc.option(fc.nat(), { nil: null, freq: 4 }),
    }),
    weight: 8,
  },
);

test('randomized: invariants hold after every step and blocks never leak', () => {
  setLogLevel('silent');
  const seen = { steps: 0, tokens: 0, preemptions: 0, loads: 0, handoffs: 0, errors: 0 };
  try {
    fc.assert(
      fc.property(
        fc.array(action, { minLength: 1, maxLength: 120, size: 'max' }),
        fc.constantFrom('fail', 'recompute'),
        (actions, policy) => {
          const h = createHarness({
            numBlocks: 20,
            maxNumBatchedTokens: 16,
            maxNumSeqs: 4,
            policy: policy as 'fail' | 'recompute',
          });
          let next = 0;
          const pickBy = <T>(items: readonly T[], n: number): T[] => items.filter((_, i) => (n >> i) & 1);
          const stepWith = (a: { recv: number; send: number; invalid: number | null }, all = false): void => {
            const core = h.scheduler.core;
            const live = [...core.requests.values()];
            const recvCandidates = live.filter(
              (r) =>
                (r.status === 'WAITING_FOR_REMOTE_KVS' && !core.finishedRecving.has(r.requestId)) ||
                r.pendingHandoff?.recv === true,
            );
            const sendCandidates = live.filter((r) => r.pendingHandoff?.send === true);
            const recv = all ? recvCandidates : pickBy(recvCandidates, a.recv);
            const send = all ? sendCandidates : pickBy(sendCandidates, a.send);
            let invalidBlockIds: number[] = [];
            if (a.invalid !== null) {
              const loading = live.filter(
                (r) => r.lifecycle === 'WAITING_FOR_REMOTE_KV' || r.lifecycle === 'FAILED',
              );
              const target = loading[a.invalid % Math.max(1, loading.length)];
              const ids = target ? (h.kv.getBlockIds(target.requestId)[0] ?? []) : [];
              const id = ids[a.invalid % Math.max(1, ids.length)];
              if (id !== undefined) invalidBlockIds = [id];
            }
            const { update } = h.step({
              finishedRecving: recv.map((r) => r.requestId),
              finishedSending: send.map((r) => r.requestId),
              invalidBlockIds,
            });
            seen.steps += 1;
            seen.loads += recv.length;
            seen.handoffs += send.length;
            for (const o of update.outputs) {
              seen.tokens += o.newTokenIds.length;
              if (o.status === 'FINISHED_ERROR') seen.errors += 1;
            }
          };
          for (const a of actions) {
            if (a.kind === 'add') {
              const id = `r${next++}`;
              const prompt = a.shared ? tokens(a.len) : tokens(a.len, 1000 * next);
              if (a.mode === 'asyncLoad') {
                h.connector.matches.set(id, (req, c) => ({
                  count: req.numTokens - c,
                  loadAsync: req.numTokens > c,
                }));
              } else if (a.mode === 'syncLoad') {
                h.connector.matches.set(id, (req, c) => ({
                  count: Math.max(0, req.numTokens - c - 2),
                  loadAsync: false,
                }));
              } else if (a.mode === 'producer') {
                h.connector.delayFree.add(id);
              } else if (a.mode === 'lookupNull') {
                let asked = 0;
                h.connector.matches.set(id, () =>
                  asked++ < 2 ? { count: null, loadAsync: false } : { count: 0, loadAsync: false },
                );
              }
              h.add(id, prompt, { maxTokens: a.maxTokens });
            } else if (a.kind === 'abort') {
              const live = [...h.scheduler.core.requests.keys()];
              const id = live[a.pick % Math.max(1, live.length)];
              if (id) h.scheduler.finishRequests([id], 'FINISHED_ABORTED');
            } else {
              stepWith(a);
            }
          }
          h.scheduler.finishRequests([...h.scheduler.core.requests.keys()], 'FINISHED_ABORTED');
          for (let i = 0; i < 10 && h.scheduler.hasRequests(); i++)
            stepWith({ recv: 0, send: 0, invalid: null }, true);
          assert.equal(h.scheduler.hasRequests(), false);
          assert.equal(h.kv.usage, 0);
          assert.equal(h.kv.numFreeBlocks, 19);
          seen.preemptions += h.scheduler.stats().numPreemptions;
        },
      ),
      { numRuns: 150 },
    );
  } finally {
    setLogLevel('info');
  }
  // The generated scenarios must actually exercise every path.
  for (const [key, value] of Object.entries(seen)) assert.ok(value > 0, `no run exercised ${key}`);
});
