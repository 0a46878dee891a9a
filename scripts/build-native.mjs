// Builds the optional native addon (native/*.c, native/kvmem.cc) at `npm install` / `npm ci`.
// It must never fail the install: any problem prints one line and exits 0, and kvconnect
// then uses its pure-JS shm ring. Set KVCONNECT_DISABLE_NATIVE=1 to skip the build.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const nativeDir = fileURLToPath(new URL('../native/', import.meta.url));
const output = join(nativeDir, 'build', 'Release', 'kvshm.node');
const fallback = 'kvconnect uses its pure-JS shm ring, KV memory and checksum paths';
/** Every source of the addon (also listed in native/binding.gyp). */
const SOURCES = ['kvshm.c', 'kvhash.c', 'kvmatmul.c', 'kvops.c', 'kvmem.cc'];

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: nativeDir, encoding: 'utf8', timeout: 180_000 });
  if (r.error) return r.error.message;
  if (r.status !== 0) {
    const lines = `${r.stderr ?? ''}\n${r.stdout ?? ''}`
      .trim()
      .split('\n')
      .filter((l) => /error/i.test(l));
    return lines[0]?.trim() || `${cmd} exited with ${r.status}`;
  }
  return null;
}

function nodeGypScript() {
  const fromNpm = process.env.npm_config_node_gyp;
  if (fromNpm && existsSync(fromNpm)) return fromNpm;
  const bundled = join(
    dirname(process.execPath),
    '..',
    'lib',
    'node_modules',
    'npm',
    'node_modules',
    'node-gyp',
    'bin',
    'node-gyp.js',
  );
  return existsSync(bundled) ? bundled : null;
}

/** Node's own headers next to the binary (distribution packages install them): no download. */
function localNodeDir() {
  const prefix = join(dirname(process.execPath), '..');
  return existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? prefix : null;
}

function build() {
  if (process.env.KVCONNECT_DISABLE_NATIVE === '1') return 'skipped (KVCONNECT_DISABLE_NATIVE=1)';
  if (process.platform !== 'linux') return `skipped (needs Linux, this is ${process.platform})`;
  const nodeDir = localNodeDir();
  const gyp = nodeGypScript();
  let gypError = 'node-gyp not found';
  if (gyp) {
    gypError = run(process.execPath, [gyp, 'rebuild', ...(nodeDir ? [`--nodedir=${nodeDir}`] : [])]);
    if (gypError === null && existsSync(output)) return null;
  }
  // No node-gyp (or it failed, e.g. offline without headers): try the compilers directly.
  if (nodeDir) {
    const objDir = join(dirname(output), 'direct');
    mkdirSync(objDir, { recursive: true });
    const common = [
      '-fPIC',
      '-O2',
      '-DNAPI_VERSION=8',
      '-DNODE_GYP_MODULE_NAME=kvshm',
      `-I${join(nodeDir, 'include', 'node')}`,
    ];
    const objects = [];
    for (const source of SOURCES) {
      const cxx = source.endsWith('.cc');
      const object = join(objDir, `${source}.o`);
      const flags = cxx ? ['-std=gnu++17', '-fno-exceptions'] : ['-ffp-contract=off'];
      const err = run(cxx ? process.env.CXX || 'c++' : process.env.CC || 'cc', [
        ...common,
        ...flags,
        '-c',
        source,
        '-o',
        object,
      ]);
      if (err !== null) return `${gypError}; direct build: ${err}`;
      objects.push(object);
    }
    const linkError = run(process.env.CXX || 'c++', ['-shared', ...objects, '-o', output]);
    if (linkError === null && existsSync(output)) return null;
  }
  return gypError ?? 'the build produced no kvshm.node';
}

try {
  const problem = build();
  if (problem === null)
    console.log('kvconnect: built the native shm addon (native/build/Release/kvshm.node)');
  else console.log(`kvconnect: native shm addon not built: ${problem}; ${fallback}`);
} catch (e) {
  console.log(
    `kvconnect: native shm addon not built: ${e instanceof Error ? e.message : String(e)}; ${fallback}`,
  );
}
process.exit(0);
