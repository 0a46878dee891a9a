/**
 * GET /v1/models as vLLM answers it (ModelList of ModelCards with a ModelPermission), and the
 * check every endpoint that takes `model` makes: only the served name is known.
 */
import { randomUUID } from 'node:crypto';
import { KVError } from '../errors/index.ts';

export function modelList(
  servedModelName: string,
  root: string,
  maxModelLen: number,
): Record<string, unknown> {
  const created = Math.floor(Date.now() / 1000);
  return {
    object: 'list',
    data: [
      {
        id: servedModelName,
        object: 'model',
        created,
        owned_by: 'vllm',
        root,
        parent: null,
        max_model_len: maxModelLen,
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
      },
    ],
  };
}

/** vLLM's _check_model: a `model` other than the served name is a 404. */
export function checkServedModel(model: string | undefined, servedModelName: string): void {
  if (model === undefined || model === servedModelName) return;
  throw new KVError('SERVER_MODEL_NOT_FOUND', `The model \`${model}\` does not exist.`, {
    field: 'model',
    hint: `This server serves "${servedModelName}" (see GET /v1/models).`,
  });
}
