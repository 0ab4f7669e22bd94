'use strict';
// The outcome of one decision (`Decision`), read from the 64-byte buffer the addon writes the C
// `shmlimit_decision` into (layout asserted in src/addon.h), and written back for a refund.

const { inspect } = require('node:util');

const native = require('./native');

const buf = native.decision;
const u8 = buf;
const u32 = new Uint32Array(buf.buffer, buf.byteOffset, 16);
const TWO32 = 4294967296;

/** The outcome of one decision. */
class Decision {
  constructor(allowed, shadowDenied, remaining, retryNs, resetNs, grant) {
    /** Admitted (and, except for a peek, the cost consumed). */
    this.allowed = allowed;
    /** Units that could still be admitted right now. */
    this.remaining = remaining;
    /** Milliseconds until the same request could be admitted (0 when allowed). */
    this.retryAfterMs = retryNs / 1e6;
    /** Milliseconds until the limit is whole again (0 for permits, or a whole limit). */
    this.resetMs = resetNs / 1e6;
    /** A shadow (dry-run) limit would have denied: allowed anyway, nothing consumed. */
    this.shadowDenied = shadowDenied;
    this.retryAfterNs = retryNs;
    this.resetAfterNs = resetNs;
    // The grant record (grant[0..1], reserved[0..1] as 32-bit words), for refunds; null when
    // nothing was recorded. (A plain field: defining it non-enumerable would cost more than
    // the decision itself.)
    this._grant = grant;
  }

  [inspect.custom](depth, options, insp) {
    const { _grant, ...shown } = this;
    return `Decision ${insp(shown, options)}`;
  }
}

/** The decision at 32-bit word `at` of the views `bytes` / `words` of a C decision array. */
function readDecisionAt(bytes, words, at) {
  let grant = null;
  if (words[at + 6] | words[at + 7] | words[at + 8] | words[at + 9] | words[at + 10] | words[at + 11] | words[at + 12] | words[at + 13]) {
    grant = [words[at + 6], words[at + 7], words[at + 8], words[at + 9], words[at + 10], words[at + 11], words[at + 12], words[at + 13]];
  }
  return new Decision(
    bytes[at * 4] === 1,
    bytes[at * 4 + 1] === 1,
    words[at + 2] + words[at + 3] * TWO32,
    words[at + 4] + words[at + 5] * TWO32,
    words[at + 14] + words[at + 15] * TWO32,
    grant,
  );
}

/** The decision the addon just wrote into its shared buffer. */
function readDecision() {
  return readDecisionAt(u8, u32, 0);
}

function putU64(words, i, value) {
  words[i] = value % TWO32;
  words[i + 1] = Math.floor(value / TWO32);
}

// Write a Decision back as the C struct into `words` (a Uint32Array of 16) at word `at`.
function writeDecision(d, bytes, words, at) {
  if (!(d instanceof Decision)) {
    throw new TypeError('expected a Decision returned by this module');
  }
  bytes.fill(0, at * 4, at * 4 + 64);
  bytes[at * 4] = d.allowed ? 1 : 0;
  bytes[at * 4 + 1] = d.shadowDenied ? 1 : 0;
  putU64(words, at + 2, d.remaining);
  putU64(words, at + 4, d.retryAfterNs);
  if (d._grant) {
    for (let i = 0; i < 8; i++) words[at + 6 + i] = d._grant[i];
  }
  putU64(words, at + 14, d.resetAfterNs);
}

module.exports = { Decision, readDecision, readDecisionAt, writeDecision, u8, u32, TWO32 };
