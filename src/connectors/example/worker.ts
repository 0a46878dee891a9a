/**
 * ExampleConnector's worker side: copies blocks between the paged KV memory and the layer
 * files. Loads are synchronous; saves write each layer into a staging folder and publish the
 * folder once every layer is written. A missing, foreign, truncated or corrupt file never
 * throws: the affected destination blocks are reported as load errors.
 */
import fs from 'node:fs';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { encodeKVFile, type KVFileShape, readBlock, readKVFileHeader, shapeMismatch } from './kv-file.ts';
import { type ExampleWorkerCounters, emptyExampleCounters } from './stats.ts';
import type { ExampleLoadJob, ExampleSaveJob } from './step-metadata.ts';
import { layerFileName, type StorageLayout } from './storage-layout.ts';

const log = getLogger('kvconnect.connectors.example.worker');

interface StagedSave {
  key: string;
  dir: string;
  layersWritten: Set<string>;
  numBlocks: number;
  failed: boolean;
}

export class ExampleWorker {
  readonly #layout: StorageLayout;
  readonly #memory: PagedKVMemory;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #model: string;
  readonly layerNames: readonly string[];
  readonly #staged = new Map<string, StagedSave>();
  readonly #loadErrors = new Set<number>();
  counters: ExampleWorkerCounters = emptyExampleCounters();

  constructor(layout: StorageLayout, memory: PagedKVMemory, model: string) {
    this.#layout = layout;
    this.#memory = memory;
    this.#kvCacheConfig = memory.kvCacheConfig;
    this.#model = model;
    this.layerNames = this.#kvCacheConfig.groups[0]?.layerNames ?? [];
  }

  #shapeOf(layerName: string): KVFileShape {
    const spec = this.#kvCacheConfig.groups[this.#memory.groupOfLayer(layerName)]?.spec;
    if (!spec) throw new Error(`no KV cache group holds layer ${layerName}`);
    return {
      dtype: this.#memory.dtype,
      blockSize: spec.blockSize,
      numKvHeads: spec.numKvHeads,
      headSize: spec.headSize,
      model: this.#model,
    };
  }

  load(job: ExampleLoadJob): void {
    const failed = new Set<number>();
    for (const layer of this.layerNames) this.#loadLayer(job, layer, failed);
    for (const id of failed) this.#loadErrors.add(id);
    this.counters.loadErrors += failed.size;
    this.counters.loadedBlocks += job.blockIds.length - failed.size;
  }

  #loadLayer(job: ExampleLoadJob, layer: string, failed: Set<number>): void {
    const failAll = (why: string): void => {
      log.warn(
        'ExampleConnector: cannot load %s of prompt %s (%s); its blocks will be recomputed or failed per kv_load_failure_policy',
        layerFileName(layer),
        job.key,
        why,
      );
      for (const id of job.blockIds) failed.add(id);
    };
    let file: Buffer;
    try {
      file = fs.readFileSync(this.#layout.layerFile(job.key, layer));
    } catch (e) {
      failAll((e as NodeJS.ErrnoException).code ?? String(e));
      return;
    }
    const header = readKVFileHeader(file);
    if (typeof header === 'string') {
      failAll(header);
      return;
    }
    const mismatch = shapeMismatch(header, this.#shapeOf(layer));
    if (mismatch) {
      failAll(mismatch);
      return;
    }
    const tensor = this.#memory.tensorIndexOfLayer(layer);
    job.blockIds.forEach((blockId, i) => {
      const block = readBlock(file, header, job.firstBlock + i);
      if (block === null) {
        if (!failed.has(blockId)) {
          log.warn(
            'ExampleConnector: block %d of %s in prompt %s is missing or corrupt',
            job.firstBlock + i,
            layerFileName(layer),
            job.key,
          );
        }
        failed.add(blockId);
        return;
      }
      this.#memory.blockRange(tensor, blockId, 1).set(block);
    });
  }

  /** Writes one layer of a save job into the job's staging folder. */
  saveLayer(job: ExampleSaveJob, layer: string): void {
    let staged = this.#staged.get(job.reqId);
    try {
      if (!staged) {
        staged = {
          key: job.key,
          dir: this.#layout.createStaging(job.key),
          layersWritten: new Set(),
          numBlocks: job.blockIds.length,
          failed: false,
        };
        this.#staged.set(job.reqId, staged);
      }
      if (staged.failed) return;
      const tensor = this.#memory.tensorIndexOfLayer(layer);
      const blocks = job.blockIds.map((id) => this.#memory.blockRange(tensor, id, 1));
      fs.writeFileSync(`${staged.dir}/${layerFileName(layer)}`, encodeKVFile(this.#shapeOf(layer), blocks));
      staged.layersWritten.add(layer);
    } catch (e) {
      log.warn(
        'ExampleConnector: saving prompt %s failed (%s); it will not be stored',
        job.key,
        (e as Error).message,
      );
      if (staged) staged.failed = true;
      this.counters.saveErrors++;
    }
  }

  /** Publishes every staged entry whose layers are all written; discards the others. */
  finishSaves(): void {
    for (const staged of this.#staged.values()) {
      const complete = !staged.failed && this.layerNames.every((l) => staged.layersWritten.has(l));
      try {
        if (complete && this.#layout.publish(staged.dir, staged.key))
          this.counters.savedBlocks += staged.numBlocks;
        else if (!complete) this.#layout.discard(staged.dir);
      } catch (e) {
        log.warn('ExampleConnector: publishing prompt %s failed (%s)', staged.key, (e as Error).message);
        this.#layout.discard(staged.dir);
        this.counters.saveErrors++;
      }
    }
    this.#staged.clear();
  }

  takeLoadErrors(): number[] {
    const ids = [...this.#loadErrors];
    this.#loadErrors.clear();
    return ids;
  }

  takeCounters(): ExampleWorkerCounters {
    const c = this.counters;
    this.counters = emptyExampleCounters();
    return c;
  }

  discardStaged(): void {
    for (const staged of this.#staged.values()) this.#layout.discard(staged.dir);
    this.#staged.clear();
  }
}
