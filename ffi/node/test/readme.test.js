'use strict';
// The README examples as written: every ```js block of this package's README (and the Node.js
// block of the repository's README, from a checkout) type-checked by tsc --strict against
// index.d.ts, then run, with their paths moved to a private directory and the names they take
// from the surrounding application (userId, app, fastify, http) given.
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { test } = require('node:test');
const vm = require('node:vm');

const { tmpdir, storePaths } = require('./helpers');

const pkg = path.join(__dirname, '..');
const tsc = require.resolve('typescript/bin/tsc');
const typeRoots = [path.dirname(path.dirname(require.resolve('@types/node/package.json')))];

/** The ```js blocks of `file`. */
function blocks(file) {
  const text = fs.readFileSync(file, 'utf8');
  return [...text.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

// The package's README ships with it; the repository's is there in a checkout (or named by
// SHMLIMIT_CHECKOUT, as tests/ffi_node.rs does for the installed package).
const checkout = process.env.SHMLIMIT_CHECKOUT || path.join(pkg, '..', '..');
const rootReadme = path.join(checkout, 'README.md');
const sources = [
  { name: 'README.md', blocks: blocks(path.join(pkg, 'README.md')) },
  { name: 'the repository README.md', blocks: fs.existsSync(rootReadme) ? [blocks(rootReadme).find((b) => b.includes("require('shmlimit')"))].filter(Boolean) : [] },
];

// What the examples take from the application around them.
const GLOBALS = `
declare const userId: string;
declare const app: { use(handler: (...args: any[]) => void): void };
declare const fastify: { register<O>(plugin: (instance: any, options: O, done: (err?: Error) => void) => void, options: O): void };
declare const http: typeof import('node:http');
declare const shmlimit: typeof import('shmlimit');
declare const limiter: import('shmlimit').Limiter;
`;

test('the README examples type-check under tsc --strict', (t) => {
  const dir = tmpdir(t);
  const files = [];
  for (const [s, source] of sources.entries()) {
    for (const [b, code] of source.blocks.entries()) {
      const file = path.join(dir, `example-${s}-${b}.js`);
      fs.writeFileSync(file, code);
      files.push(file);
    }
  }
  assert.ok(files.length >= 3, `only ${files.length} examples found`);
  fs.writeFileSync(path.join(dir, 'globals.d.ts'), GLOBALS);
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true, noEmit: true, allowJs: true, checkJs: true, target: 'es2022', module: 'commonjs',
      moduleResolution: 'node', lib: ['es2022'], types: ['node'], typeRoots, baseUrl: dir,
      paths: { shmlimit: [path.join(pkg, 'index.d.ts')], ...storePaths(pkg) },
    },
    files: [path.join(dir, 'globals.d.ts'), ...files],
  }));
  const out = spawnSync(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(out.status, 0, `tsc --strict rejected a README example:\n${out.stdout}${out.stderr}`);
});

test('the README examples run', async (t) => {
  const dir = tmpdir(t);
  for (const source of sources) {
    if (source.blocks.length === 0) continue;
    const servers = [];
    const context = vm.createContext({
      require: (name) => require(name === 'shmlimit' ? pkg : name),
      console,
      Buffer,
      userId: 'alice',
      app: { use: (handler) => assert.equal(typeof handler, 'function') },
      fastify: { register: (plugin) => assert.equal(plugin, require(pkg).fastifyPlugin) },
      http: { createServer: (handler) => servers.push(http.createServer(handler)) },
    });
    for (const code of source.blocks) {
      // Their paths, in a private directory.
      const moved = code.replace(/'(\/run\/app|\/dev\/shm)\/([a-z]+\.shm)'/g, (_, _d, file) => JSON.stringify(path.join(dir, file)));
      vm.runInContext(moved, context, { filename: `${source.name} example` });
    }
    assert.equal(vm.runInContext('d.allowed', context), true, `${source.name}: the first decision`);
    if (source.name === 'README.md') {
      const granted = await vm.runInContext('inTurn()', context);
      assert.equal(granted && granted.allowed, true, 'the reservation example');
      const waited = await vm.runInContext('whenAdmitted()', context);
      assert.equal(waited.allowed, true, 'the prepared wait example');
      assert.deepEqual(waited.limits.map((l) => l.name), ['api', 'per_user']);
      assert.equal(servers.length, 1, 'the node:http example made its server');
    }
  }
});
