// Makes the compiled CLI executable so `npx kvconnect` works right after `npm ci`.
import { chmodSync, existsSync } from 'node:fs';

const bin = new URL('../dist/cli/main.js', import.meta.url);
if (existsSync(bin)) chmodSync(bin, 0o755);
