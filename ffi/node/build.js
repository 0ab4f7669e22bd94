#!/usr/bin/env node
// Builds the package's compiled addon, prebuilds/<platform>-<arch>/shmlimit.node: the C sources
// in src/ compiled against the Node-API headers and the C header shmlimit.h, with
// libshmlimit.a linked in statically, so the addon has no run-time library path to find.
//
// The published package carries the addon prebuilt for linux-x64 and has no install script:
// this runs when the package is packed (`npm pack` runs it as `prepack`) or by hand, from a
// checkout. Steps:
//   1. libshmlimit.a: from SHMLIMIT_LIB_DIR when set (a directory holding it), else
//      `cargo build --release -p libshmlimit` (the C library's package) in the workspace this
//      package sits in (../.. or SHMLIMIT_CRATE_DIR), in cargo's own target directory (the
//      checkout's target/ unless CARGO_TARGET_DIR says otherwise).
//   2. shmlimit.h: from SHMLIMIT_INCLUDE_DIR when set, else the workspace's ffi/include.
//   3. The Node-API headers: include/node-api/ (a copy of the node-api-headers package; see
//      napiInclude below). Nothing is downloaded.
//   4. `cc` (or $CC) compiles and links the shared object.
// It writes prebuilds/ (the addon) and build/build-info.json (what it was built from; not
// packed) in this folder.
//
// SHMLIMIT_NODE_STRICT=1 makes compiler warnings errors (the test suite sets it).
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const { addonPath } = require('./lib/addon');

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

// The workspace this package sits in, or null when there is none (a copy of the package).
function crateDir() {
  const dir = process.env.SHMLIMIT_CRATE_DIR || path.resolve(here, '..', '..');
  const manifest = path.join(dir, 'Cargo.toml');
  if (!fs.existsSync(manifest) || !/^name\s*=\s*"shmlimit"/m.test(fs.readFileSync(manifest, 'utf8'))) {
    return null;
  }
  return dir;
}

function needCrate(crate, what, variable) {
  if (crate === null) {
    const dir = process.env.SHMLIMIT_CRATE_DIR || path.resolve(here, '..', '..');
    fail(`no shmlimit crate at ${dir} to take ${what} from: build from a checkout of shmlimit (or set SHMLIMIT_CRATE_DIR), or set ${variable}`);
  }
  return crate;
}

function libraryDir(crate) {
  if (process.env.SHMLIMIT_LIB_DIR) {
    return path.resolve(process.env.SHMLIMIT_LIB_DIR);
  }
  const manifest = path.join(needCrate(crate, 'libshmlimit.a', 'SHMLIMIT_LIB_DIR'), 'Cargo.toml');
  run('cargo', ['build', '--release', '-p', 'libshmlimit', '--manifest-path', manifest], { stdio: ['ignore', 'inherit', 'inherit'] });
  const meta = JSON.parse(run('cargo', ['metadata', '--format-version', '1', '--no-deps', '--manifest-path', manifest]).toString());
  return path.join(meta.target_directory, 'release');
}

function headerDir(crate) {
  const dir = process.env.SHMLIMIT_INCLUDE_DIR
    ? path.resolve(process.env.SHMLIMIT_INCLUDE_DIR)
    : path.join(needCrate(crate, 'shmlimit.h', 'SHMLIMIT_INCLUDE_DIR'), 'ffi', 'include');
  if (!fs.existsSync(path.join(dir, 'shmlimit.h'))) {
    fail(`no shmlimit.h in ${dir}`);
  }
  return dir;
}

// The Node-API headers: include/node-api/, a copy of the node-api-headers package 1.9.0 (MIT,
// from the npm registry). Not a dependency: the build needs no download, where node-gyp would
// fetch Node's headers from nodejs.org. Node-API is a stable C ABI, so these headers build an
// addon that loads in every Node with Node-API 8 (16 and later). SHMLIMIT_NAPI_INCLUDE names
// another directory.
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
const include = headerDir(crate);
const libDir = libraryDir(crate);
const archive = path.join(libDir, 'libshmlimit.a');
if (!fs.existsSync(archive)) {
  fail(`${archive} is missing`);
}
const napi = napiInclude();
const target = addonPath(here);
fs.mkdirSync(path.dirname(target), { recursive: true });
const tmp = `${target}.${process.pid}.tmp`;
const sources = fs.readdirSync(path.join(here, 'src'))
  .filter((name) => name.endsWith('.c'))
  .sort()
  .map((name) => path.join(here, 'src', name));

const cc = process.env.CC || 'cc';
const strict = process.env.SHMLIMIT_NODE_STRICT === '1' ? ['-Werror', '-pedantic'] : [];
run(cc, [
  '-std=c11', '-O2', '-fPIC', '-shared', '-fvisibility=hidden',
  '-Wall', '-Wextra', ...strict,
  '-I', napi, '-I', include,
  ...sources,
  archive,
  // The library's own symbols (and Rust's standard library) stay inside the addon.
  '-Wl,--exclude-libs,ALL',
  // Unused sections dropped, symbols stripped: the packed addon is what users download.
  '-Wl,--gc-sections', '-s',
  '-lpthread', '-ldl', '-lm',
  '-o', tmp,
], { stdio: ['ignore', 'inherit', 'inherit'] });
fs.renameSync(tmp, target);
// What it was built from, for the tests (which build C programs against the same library).
fs.mkdirSync(path.join(here, 'build'), { recursive: true });
fs.writeFileSync(path.join(here, 'build', 'build-info.json'), `${JSON.stringify({
  addon: target, archive, include, napiInclude: napi, crate,
}, null, 2)}\n`);
process.stderr.write(`shmlimit: built ${target} (${archive}, ${path.join(include, 'shmlimit.h')})\n`);
