'use strict';
// The package's entry point: the limits (index.js) and the HTTP middleware built on them
// (middleware.js), in one namespace. index.js does not know the middleware, which requires
// index.js: no module requires one that requires it back.

module.exports = { ...require('./index'), ...require('./middleware') };
