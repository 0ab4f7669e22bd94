'use strict';
// The package's compiled addon: where it is, and loading it with a hint when it is missing.
// The package ships it prebuilt (prebuilds/linux-x64/shmlimit.node, linked with glibc); build.js
// builds it for the machine it runs on, from a checkout (the packed package has no build.js).

const fs = require('node:fs');
const path = require('node:path');

/** The platforms the packed package carries a prebuilt addon for. */
const PREBUILT = ['linux-x64'];

/** The addon's path in the package at `root`, for this platform and architecture. */
function addonPath(root) {
  return path.join(root, 'prebuilds', `${process.platform}-${process.arch}`, 'shmlimit.node');
}

/**
 * What to do about a missing or unloadable addon of the package at `root` on `platform`: in a
 * checkout (build.js beside the package) build it; in an installed package (no build.js) either
 * reinstall it (the prebuilt binary is missing) or use a supported platform.
 */
function remedy(root, platform) {
  if (fs.existsSync(path.join(root, 'build.js'))) {
    return `this is a checkout: build it with \`node build.js\` in ${root} (needs the Rust ` +
      'toolchain and a C compiler, or SHMLIMIT_LIB_DIR and SHMLIMIT_INCLUDE_DIR naming a built ' +
      'libshmlimit.a and its shmlimit.h)';
  }
  if (!PREBUILT.includes(platform)) {
    return `the package ships its addon prebuilt for ${PREBUILT.join(', ')} (glibc) only, and ` +
      `${platform} is not supported by the installed package`;
  }
  return `the installed package ships it prebuilt for ${platform} (glibc), and it is not there ` +
    `or not whole: reinstall the package (remove ${root} and run npm install again)`;
}

/**
 * The compiled addon of the package at `root`, or an error that says how to get one (see
 * `remedy`).
 */
function loadAddon(root) {
  const file = addonPath(root);
  try {
    return require(file);
  } catch (err) {
    const missing = err && err.code === 'MODULE_NOT_FOUND' && String(err.message).includes(file);
    const hint = new Error(
      `shmlimit: ${missing ? 'no compiled addon' : 'the compiled addon could not be loaded'} for ` +
        `${process.platform}-${process.arch} at ${file}${missing ? '' : ` (${err && err.message})`}: ` +
        remedy(root, `${process.platform}-${process.arch}`),
    );
    hint.code = missing ? 'SHMLIMIT_ADDON_MISSING' : 'SHMLIMIT_ADDON_UNLOADABLE';
    hint.cause = err;
    throw hint;
  }
}

module.exports = { addonPath, loadAddon, remedy };
