import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  readSafetensorsFile,
  tensorToFloat32,
  writeSafetensorsFile,
} from '../../../src/engine/model/safetensors.ts';
import { KVError } from '../../../src/errors/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'kvconnect-st-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const values = Float32Array.from([0, 1, -1, 0.5, 3.140625, -2.5e-3, 65504, 1e-7, 123.456, -0.1, 7, 8]);

test('F32, F16 and BF16 tensors round-trip through a file', () => {
  const file = join(dir, 'rt.safetensors');
  writeSafetensorsFile(
    file,
    {
      a: { dtype: 'F32', shape: [3, 4], data: values },
      b: { dtype: 'F16', shape: [12], data: values },
      c: { dtype: 'BF16', shape: [2, 2, 3], data: values },
      empty: { dtype: 'F32', shape: [0, 5], data: new Float32Array(0) },
    },
    { format: 'pt' },
  );
  const t = readSafetensorsFile(file);
  assert.deepEqual([...t.keys()].sort(), ['a', 'b', 'c', 'empty']);
  assert.deepEqual(t.get('c')?.shape, [2, 2, 3]);
  assert.deepEqual(tensorToFloat32(t.get('a')!), values);
  const f16 = tensorToFloat32(t.get('b')!);
  const bf16 = tensorToFloat32(t.get('c')!);
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    assert.ok(Math.abs(f16[i]! - v) <= Math.max(Math.abs(v) * 2 ** -11, 6e-8), `f16 ${v} → ${f16[i]}`);
    assert.ok(Math.abs(bf16[i]! - v) <= Math.abs(v) * 2 ** -8, `bf16 ${v} → ${bf16[i]}`);
  }
  assert.equal(f16[6], 65504);
  assert.equal(bf16[4], 3.140625);
});

function expectInvalid(bytes: Uint8Array, problem: RegExp): void {
  const file = join(dir, `bad-${Math.random().toString(36).slice(2)}.safetensors`);
  writeFileSync(file, bytes);
  assert.throws(
    () => readSafetensorsFile(file),
    (e: unknown) =>
      e instanceof KVError &&
      e.code === 'SAFETENSORS_INVALID' &&
      e.message.includes(file) &&
      problem.test(e.message),
  );
}

function withHeader(header: unknown, dataBytes: number, headerLen?: number): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + dataBytes);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLen ?? json.length), true);
  out.set(json, 8);
  return out;
}

test('malformed files give a clear KVError naming the file and the problem', () => {
  expectInvalid(new Uint8Array(5), /shorter than the 8-byte header/);
  expectInvalid(withHeader({}, 0, 1e9), /header length 1000000000 exceeds/);
  const notJson = withHeader({}, 0);
  notJson[8] = 0x7b;
  notJson[9] = 0x7b;
  expectInvalid(notJson, /not valid UTF-8 JSON/);
  expectInvalid(withHeader([1, 2], 0), /not a JSON object/);
  expectInvalid(
    withHeader({ x: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } }, 8),
    /unsupported dtype "I64"/,
  );
  expectInvalid(withHeader({ x: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, 4), /invalid shape/);
  expectInvalid(
    withHeader({ x: { dtype: 'F32', shape: [2], data_offsets: [8, 0] } }, 8),
    /invalid data_offsets/,
  );
  expectInvalid(
    withHeader({ x: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, 8),
    /runs past the end/,
  );
  expectInvalid(
    withHeader({ x: { dtype: 'F16', shape: [3], data_offsets: [0, 8] } }, 8),
    /has 8 bytes but shape \[3\] of F16 needs 6/,
  );
});

test('a missing file is a KVError too', () => {
  assert.throws(
    () => readSafetensorsFile(join(dir, 'nope.safetensors')),
    (e: unknown) => e instanceof KVError && e.code === 'MODEL_FILE_NOT_FOUND',
  );
});
