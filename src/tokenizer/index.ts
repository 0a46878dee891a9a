export { ByteTokenizer } from './byte-tokenizer.ts';
export { type ChatRenderOptions, simpleChatTemplate } from './chat-template.ts';
export { IncrementalDetokenizer } from './detokenizer.ts';
export { HFTokenizer } from './hf-tokenizer.ts';
export { loadTokenizer } from './load.ts';
