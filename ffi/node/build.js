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
//   4. The compiler, which compiles and links the shared object: Zig wherever it is found
//      (`zig cc -target x86_64-linux-gnu.2.17`, aarch64 likewise), which links the addon against
//      glibc 2.17's symbol versions whatever this machine's glibc, so that the packed addon loads
//      on every glibc Linux that Node 16 and later run on (as the Python wheel, manylinux2014).
//      Zig is SHMLIMIT_ZIG (the path of a zig executable), else `zig` on PATH, else the
//      `ziglang` pip package (`python3 -m ziglang`). Without Zig (or with SHMLIMIT_ZIG=off) the
//      system `cc` (or $CC): its addon needs this machine's glibc (2.34 or later on a glibc that
//      recent: glibc 2.34 moved libpthread into libc, and the Rust standard library's
//      pthread_create, dlsym, ... bind to their 2.34 versions), fine for a build used where it
//      is made. The static library needs no special build: its objects name glibc's functions
//      without versions, which the link binds.
// It writes prebuilds/ (the addon) and build/ (build-info.json, what it was built from and which
// glibc it needs, and the link's export list; not packed) in this folder, and says which
// compiler it used and which glibc the addon needs.
//
// SHMLIMIT_NODE_STRICT=1 makes compiler warnings errors (the test suite sets it).
'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const { addonPath } = require('./lib/addon');
const { glibcNeeded } = require('./tools/glibc');

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

// The oldest glibc the addon built by Zig runs on: manylinux2014's, and what Node 16's own
// Linux binaries need.
const ZIG_GLIBC = '2.17';
// Zig's names of the architectures it links this addon for (those with glibc 2.17 ports).
const ZIG_ARCH = { x64: 'x86_64', arm64: 'aarch64' };

// Zig, as { cmd, prefix (its arguments before the subcommand), version }, or { why } it is not
// used.
function findZig() {
  const named = process.env.SHMLIMIT_ZIG;
  if (named === 'off') {
    return { why: 'SHMLIMIT_ZIG=off' };
  }
  if (!ZIG_ARCH[process.arch]) {
    return { why: `no glibc ${ZIG_GLIBC} target for ${process.arch}` };
  }
  const candidates = named ? [[named, []]] : [['zig', []], ['python3', ['-m', 'ziglang']]];
  for (const [cmd, prefix] of candidates) {
    try {
      const version = execFileSync(cmd, [...prefix, 'version'], { stdio: ['ignore', 'pipe', 'ignore'] })
        .toString().trim();
      return { cmd, prefix, version };
    } catch (err) {
      if (named) {
        fail(`SHMLIMIT_ZIG=${named} does not run \`${named} version\` (${err.code || `exit status ${err.status}`}): name a zig executable, or set SHMLIMIT_ZIG=off to use the system cc`);
      }
    }
  }
  return { why: 'no `zig` on PATH and no `python3 -m ziglang` (pip install ziglang)' };
}

const zig = findZig();
const [compiler, compilerArgs, compilerName] = zig.cmd
  ? [zig.cmd, [...zig.prefix, 'cc', '-target', `${ZIG_ARCH[process.arch]}-linux-gnu.${ZIG_GLIBC}`],
    `zig ${zig.version} (${zig.cmd === 'python3' ? 'python3 -m ziglang' : zig.cmd})`]
  : [process.env.CC || 'cc', [], `the system ${process.env.CC || 'cc'}`];
// The addon exports its module registration only: the library's own symbols (and Rust's
// standard library) stay inside it. A version script, which GNU ld and Zig's linker both take
// (Zig's takes no --exclude-libs).
const exportsMap = path.join(here, 'build', 'exports.map');
fs.mkdirSync(path.dirname(exportsMap), { recursive: true });
fs.writeFileSync(exportsMap, '{\n  global: napi_register_module_v1; node_api_module_get_api_version_v1;\n  local: *;\n};\n');
const strict = process.env.SHMLIMIT_NODE_STRICT === '1' ? ['-Werror', '-pedantic'] : [];
run(compiler, [
  ...compilerArgs,
  '-std=c11', '-O2', '-fPIC', '-shared', '-fvisibility=hidden',
  '-Wall', '-Wextra', ...strict,
  '-I', napi, '-I', include,
  ...sources,
  archive,
  `-Wl,--version-script=${exportsMap}`,
  // Unused sections dropped, symbols stripped: the packed addon is what users download.
  '-Wl,--gc-sections', '-s',
  // What the Rust static library needs (rustc --print native-static-libs). -lgcc_s is Rust's
  // unwinder: the system cc links libgcc_s.so.1 for it, Zig its own libunwind, inside the addon.
  '-lgcc_s', '-lpthread', '-ldl', '-lm',
  '-o', tmp,
], { stdio: ['ignore', 'inherit', 'inherit'] });
fs.renameSync(tmp, target);
const glibc = glibcNeeded(target);
// What it was built from, for the tests (which build C programs against the same library).
fs.writeFileSync(path.join(here, 'build', 'build-info.json'), `${JSON.stringify({
  addon: target, archive, include, napiInclude: napi, crate, compiler: compilerName, glibc,
}, null, 2)}\n`);
process.stderr.write(`shmlimit: built ${target} (${archive}, ${path.join(include, 'shmlimit.h')}) with ${compilerName}: it needs glibc ${glibc} or later\n`);
if (!zig.cmd) {
  process.stderr.write(`shmlimit: Zig not used (${zig.why}): the addon loads only where glibc is ${glibc} or later; with Zig (pip install ziglang, or a zig on PATH) it would need glibc ${ZIG_GLIBC}\n`);
  if (process.env.npm_lifecycle_event === 'prepack') {
    process.stderr.write(`shmlimit: WARNING: the package being packed carries an addon that needs glibc ${glibc}, not ${ZIG_GLIBC}\n`);
  }
}
