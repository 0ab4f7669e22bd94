'use strict';
// The compiled addon of this package, loaded once (lib/addon.js says where it is and what to do
// when it is missing), and the library's version.

const path = require('node:path');

const { loadAddon } = require('./addon');

const native = loadAddon(path.join(__dirname, '..'));

module.exports = native;
