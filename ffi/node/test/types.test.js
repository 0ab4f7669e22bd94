'use strict';
// index.d.ts checked by the TypeScript compiler in strict mode: a usage file compiles, and
// misuse is rejected.
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');

const { storePaths } = require('./helpers');

// TypeScript and Node's typings: the package's devDependencies, found as `require` finds them
// (NODE_PATH when the tests run inside the installed package).
const tsc = require.resolve('typescript/bin/tsc');
const typeRoots = [path.dirname(path.dirname(require.resolve('@types/node/package.json')))];

function compile(file, t, paths = {}) {
  const dir = path.join(__dirname, 'types');
  const config = path.join(dir, `tsconfig.${path.basename(file, '.ts')}.json`);
  const base = JSON.parse(fs.readFileSync(path.join(dir, 'tsconfig.json'), 'utf8'));
  const compilerOptions = { ...base.compilerOptions, typeRoots, paths: { ...base.compilerOptions.paths, ...paths } };
  fs.writeFileSync(config, JSON.stringify({ ...base, compilerOptions, files: [file] }));
  t.after(() => fs.rmSync(config, { force: true }));
  return spawnSync(process.execPath, [tsc, '-p', config], { encoding: 'utf8' });
}

test('index.d.ts: the usage file compiles with tsc --strict, and misuse does not', (t) => {
  assert.ok(fs.existsSync(tsc), `TypeScript is not installed at ${tsc}: run npm install (it is a devDependency)`);
  const ok = compile('usage.ts', t);
  assert.equal(ok.status, 0, `tsc failed on usage.ts:\n${ok.stdout}${ok.stderr}`);
  const bad = compile('misuse.ts', t);
  assert.notEqual(bad.status, 0, 'tsc accepted misuse.ts');
  assert.match(bad.stdout, /misuse\.ts\(5,16\): error TS2345/);
  assert.match(bad.stdout, /misuse\.ts\(6,12\): error TS2345/);
  // A prepared check's acquire: keys are strings or bytes, the options only last.
  assert.match(bad.stdout, /misuse\.ts\(8,15\): error TS2769/);
  assert.match(bad.stdout, /misuse\.ts\(9,25\): error TS2769/);
});

test('the subpaths\' declarations fit express-rate-limit\'s Store and rate-limiter-flexible\'s classes under tsc --strict', (t) => {
  const out = compile('stores.ts', t, storePaths(path.join(__dirname, '..')));
  assert.equal(out.status, 0, `tsc failed on stores.ts:\n${out.stdout}${out.stderr}`);
});

test('index.d.ts declares every export of the module, and nothing it does not export', () => {
  const ts = require('typescript');
  const file = path.join(__dirname, '..', 'index.d.ts');
  const source = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
  const declared = new Set();
  for (const node of source.statements) {
    const exported = (node.modifiers || []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
    if (!exported) continue;
    if (ts.isClassDeclaration(node) || ts.isFunctionDeclaration(node)) declared.add(node.name.text);
    if (ts.isVariableStatement(node)) node.declarationList.declarations.forEach((d) => declared.add(d.name.text));
  }
  const exported = new Set(Object.keys(require('..')));
  assert.deepEqual([...exported].filter((n) => !declared.has(n)), [], 'exported but not declared in index.d.ts');
  assert.deepEqual([...declared].filter((n) => !exported.has(n)), [], 'declared in index.d.ts but not exported');
  assert.ok(declared.size >= 40, `only ${declared.size} declarations found`);
});
