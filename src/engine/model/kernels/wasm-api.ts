/**
 * The few WebAssembly JS-API members the kernels use, typed locally: the project's
 * TypeScript lib setting (ES2023, no DOM) does not declare the WebAssembly global.
 */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}

export interface WasmModule {
  readonly kind?: 'module';
}

export interface WasmApi {
  Memory: new (descriptor: { initial: number; maximum?: number }) => WasmMemory;
  Module: new (bytes: Uint8Array) => WasmModule;
  Instance: new (
    module: WasmModule,
    imports: Record<string, Record<string, unknown>>,
  ) => { exports: Record<string, unknown> };
  validate(bytes: Uint8Array): boolean;
}

export const wasmApi = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
