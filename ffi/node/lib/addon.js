'use strict';
// The package's compiled addon: where it is, and loading it with a hint when it is missing.
// The package ships it prebuilt (prebuilds/linux-x64/shmlimit.node, linked with glibc); build.js
// builds it for the machine it runs on.

const path = require('node:path');

/** The addon's path in the package at `root`, for this platform and architecture. */
function addonPath(root) {
  return path.join(root, 'prebuilds', `${process.platform}-${process.arch}`, 'shmlimit.node');
}

/**
 * The compiled addon of the package at `root`, or an error that says how to get one: the
 * packed package carries it for linux-x64, and `node build.js` builds it from a checkout.
 */
function loadAddon(root) {
  const file = addonPath(root);
  try {
    return require(file);
  } catch (err) {
    const missing = err && err.code === 'MODULE_NOT_FOUND' && String(err.message).includes(file);
    const hint = new Error(
      `shmlimit: ${missing ? 'no compiled addon' : 'the compiled addon could not be loaded'} for ` +
        `${process.platform}-${process.arch} at ${file}${missing ? '' : ` (${err && err.message})`}: the package ` +
        'ships it prebuilt for linux-x64 with glibc; on another platform, or from a checkout, build it ' +
        `with \`node build.js\` in ${root} (needs the Rust toolchain and a C compiler)`,
    );
    hint.code = missing ? 'SHMLIMIT_ADDON_MISSING' : 'SHMLIMIT_ADDON_UNLOADABLE';
    hint.cause = err;
    throw hint;
  }
}

module.exports = { addonPath, loadAddon };
