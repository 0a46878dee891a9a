export { createHttpServer, type HttpListener, type Listener, listen } from './listen.ts';
export { sendError, sendJson, sendText, writeChunk, writeEarlyHints } from './reply.ts';
export { type BodyRules, headerValue, readBody, readJson } from './request.ts';
export { type Handler, pathOf, Router, type RouterCodes } from './router.ts';
