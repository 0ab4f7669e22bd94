#!/usr/bin/env node
// Builds build/Release/shmlimit.node: the addon (src/addon.c) compiled against the Node-API
// headers and ffi/include/shmlimit.h, with libshmlimit.a linked in statically, so the addon
// has no run-time library path to find and `require('shmlimit')` works from any directory.
//
// Runs as the package's `install` script. Steps:
//   1. libshmlimit.a: from SHMLIMIT_LIB_DIR when set (a directory holding it), else
//      `cargo build --release -p libshmlimit` (the C library's package) in the workspace this
//      package sits in (../.. or SHMLIMIT_CRATE_DIR), in cargo's own target directory.
//   2. The Node-API headers: include/node-api/ (a copy of the node-api-headers package; see
//      napiInclude below). Nothing is downloaded.
//   3. `cc` (or $CC) compiles and links the shared object.
//
// SHMLIMIT_NODE_STRICT=1 makes compiler warnings errors (the test suite sets it).
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const here = __dirname;

function fail(message) {
  process.stderr.write(`shmlimit: ${message}\n`);
  process.exit(1);
}

function run(cmd, args, options = {}) {
  process.stderr.write(`shmlimit: ${[cmd, ...args].join(' ')}\n`);
  try {
    return execFileSync(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'], ...options });
  } catch (err) {
    if (err.code === 'ENOENT') {
      fail(`${cmd} was not found on PATH (${cmd === 'cargo' ? 'install the Rust toolchain, https://rustup.rs' : 'install a C compiler, or set CC'})`);
    }
    fail(`${cmd} failed (exit status ${err.status})`);
  }
}

if (process.platform !== 'linux') {
  fail(`the library is Linux only (futexes, /proc); this is ${process.platform}`);
}

function crateDir() {
  const dir = process.env.SHMLIMIT_CRATE_DIR || path.resolve(here, '..', '..');
  const manifest = path.join(dir, 'Cargo.toml');
  if (!fs.existsSync(manifest) || !/^name\s*=\s*"shmlimit"/m.test(fs.readFileSync(manifest, 'utf8'))) {
    fail(`no shmlimit crate at ${dir}: install this package from a checkout (npm install <checkout>/ffi/node), or set SHMLIMIT_CRATE_DIR`);
  }
  return dir;
}

function libraryDir(crate) {
  if (process.env.SHMLIMIT_LIB_DIR) {
    return path.resolve(process.env.SHMLIMIT_LIB_DIR);
  }
  const manifest = path.join(crate, 'Cargo.toml');
  run('cargo', ['build', '--release', '-p', 'libshmlimit', '--manifest-path', manifest], { stdio: ['ignore', 'inherit', 'inherit'] });
  const meta = JSON.parse(run('cargo', ['metadata', '--format-version', '1', '--no-deps', '--manifest-path', manifest]).toString());
  return path.join(meta.target_directory, 'release');
}

// The Node-API headers: include/node-api/, a copy of the node-api-headers package 1.9.0 (MIT,
// from the npm registry). Not a dependency: `npm install <checkout>/ffi/node` links the folder
// and installs none of its dependencies, and node-gyp would fetch Node's headers from
// nodejs.org. Node-API is a stable C ABI, so these headers build an addon that loads in every
// Node with Node-API 8 (16 and later). SHMLIMIT_NAPI_INCLUDE names another directory.
function napiInclude() {
  const dir = process.env.SHMLIMIT_NAPI_INCLUDE
    ? path.resolve(process.env.SHMLIMIT_NAPI_INCLUDE)
    : path.join(here, 'include', 'node-api');
  if (!fs.existsSync(path.join(dir, 'node_api.h'))) {
    fail(`no node_api.h in ${dir}`);
  }
  return dir;
}

const crate = crateDir();
const libDir = libraryDir(crate);
const archive = path.join(libDir, 'libshmlimit.a');
if (!fs.existsSync(archive)) {
  fail(`${archive} is missing`);
}
const include = napiInclude();
const out = path.join(here, 'build', 'Release');
fs.mkdirSync(out, { recursive: true });
const target = path.join(out, 'shmlimit.node');
const tmp = `${target}.${process.pid}.tmp`;

const cc = process.env.CC || 'cc';
const strict = process.env.SHMLIMIT_NODE_STRICT === '1' ? ['-Werror', '-pedantic'] : [];
run(cc, [
  '-std=c11', '-O2', '-fPIC', '-shared', '-fvisibility=hidden',
  '-Wall', '-Wextra', ...strict,
  '-I', include, '-I', path.join(crate, 'ffi', 'include'),
  path.join(here, 'src', 'addon.c'),
  archive,
  // The library's own symbols (and Rust's standard library) stay inside the addon.
  '-Wl,--exclude-libs,ALL',
  '-lpthread', '-ldl', '-lm',
  '-o', tmp,
], { stdio: ['ignore', 'inherit', 'inherit'] });
fs.renameSync(tmp, target);
// What the tests need to build C programs against the same library and header.
fs.writeFileSync(path.join(out, 'build-info.json'), `${JSON.stringify({
  archive, include: path.join(crate, 'ffi', 'include'), napiInclude: include, crate,
}, null, 2)}\n`);
process.stderr.write(`shmlimit: built ${target} (Node-API headers from ${include}, ${archive})\n`);
