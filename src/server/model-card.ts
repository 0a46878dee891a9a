/**
 * GET /v1/models as vLLM answers it (ModelList of ModelCards with a ModelPermission), and the
 * check every endpoint that takes `model` makes: only the served name is known.
 */
import { randomUUID } from 'node:crypto';
import { KVError } from '../errors/index.ts';
import type { ServedModels } from './served-models.ts';

export function modelList(
  servedModelName: string,
  root: string,
  maxModelLen: number,
  adapters: ReadonlyArray<{ id: string; root: string; parent: string }> = [],
): Record<string, unknown> {
  const created = Math.floor(Date.now() / 1000);
  const card = (id: string, root: string, parent: string | null, maxLen: number | null) => ({
    id,
    object: 'model',
    created,
    owned_by: 'vllm',
    root,
    parent,
    max_model_len: maxLen,
    permission: [
      {
        id: `modelperm-${randomUUID().replaceAll('-', '')}`,
        object: 'model_permission',
        created,
        allow_create_engine: false,
        allow_sampling: true,
        allow_logprobs: true,
        allow_search_indices: false,
        allow_view: true,
        allow_fine_tuning: false,
        organization: '*',
        group: null,
        is_blocking: false,
      },
    ],
  });
  // vLLM's LoRA cards: root is the adapter path, parent the base model, no max_model_len.
  return {
    object: 'list',
    data: [
      card(servedModelName, root, null, maxModelLen),
      ...adapters.map((a) => card(a.id, a.root, a.parent, null)),
    ],
  };
}

/** vLLM's _check_model: a `model` other than the served name (or a served adapter) is a 404. */
export function checkServedModel(
  model: string | undefined,
  servedModelName: string,
  models?: ServedModels,
): void {
  if (models) {
    models.resolve(model);
    return;
  }
  if (model === undefined || model === servedModelName) return;
  throw new KVError('SERVER_MODEL_NOT_FOUND', `The model \`${model}\` does not exist.`, {
    field: 'model',
    hint: `This server serves "${servedModelName}" (see GET /v1/models).`,
  });
}
