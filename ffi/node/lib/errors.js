'use strict';
// Errors: one class per status code, each with `code` (the C name) and `status`, made from the
// table generated from the Rust one (lib/status.js); and the error of a failed addon call.

const native = require('./native');
const STATUSES = require('./status');

/** Statuses of the addon that are not the library's (lib/status.js has them too). */
const CLOSED = -1;
const BAD_ARG = -2;
const NOT_HELD = -3;

const CODE_NAMES = {};
const ERROR_CLASSES = {};

class ShmlimitError extends Error {
  constructor(message, status, osError) {
    super(message);
    this.name = this.constructor.name;
    /** The C status code (a `shmlimit_status`), or -1 for a closed handle. */
    this.status = status;
    if (osError) {
      /** The OS `errno` of an I/O failure. */
      this.errno = osError;
    }
  }
}
Object.defineProperty(ShmlimitError.prototype, 'code', {
  get() {
    return CODE_NAMES[this.status] || `SHMLIMIT_STATUS_${this.status}`;
  },
});

const errors = { ShmlimitError };
for (const [status, code, name] of STATUSES) {
  // A named class per code, so that `instanceof` and `err.name` both work; the status is the
  // class's own when none is given (`new PermitUnavailableError(message)`).
  const cls = {
    [name]: class extends ShmlimitError {
      constructor(message, st = status, osError = 0) {
        super(message, st, osError);
      }
    },
  }[name];
  CODE_NAMES[status] = code;
  ERROR_CLASSES[status] = cls;
  errors[name] = cls;
}

function makeError(status, message, osError) {
  const cls = ERROR_CLASSES[status] || ShmlimitError;
  return new cls(message || native.strerror(status), status, osError);
}

// The error of a failed call: its status, and the library's message for this thread.
function failure(status, what) {
  if (status === CLOSED) {
    return makeError(CLOSED, `${what}: the handle is closed`);
  }
  if (status === BAD_ARG) {
    return new TypeError(`${what}: invalid argument (costs, counts and durations are non-negative integers; keys are strings or Uint8Arrays)`);
  }
  const [message, osError] = native.lastError();
  return makeError(status, message || `${what}: ${native.strerror(status)}`, status === 100 ? osError : 0);
}

module.exports = { CLOSED, BAD_ARG, NOT_HELD, errors, makeError, failure, ...errors };
