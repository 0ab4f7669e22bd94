'use strict';
// Reservations: tokens of a token bucket booked in turn across processes, waited for on timers.

const native = require('./native');
const { readDecision } = require('./decision');
const { NOT_HELD, failure } = require('./errors');
const { sleep } = require('./waiting');

/** Tokens of a token bucket booked in turn across processes, to be used at `readyAtNs`. */
class Reservation {
  constructor(limit, handle, delayNs, readyAtNs) {
    this.limit = limit;
    /** How long after booking the caller may proceed, in ms. */
    this.delayMs = Number(delayNs) / 1e6;
    /** When the caller may proceed, on CLOCK_MONOTONIC (process.hrtime.bigint()). */
    this.readyAtNs = readyAtNs;
    Object.defineProperty(this, '_r', { value: handle });
  }

  /** Sleep on timers until the booking's time, then resolve its grant (a Decision). */
  async wait(opts = {}) {
    const signal = opts.signal;
    for (;;) {
      const left = this.readyAtNs - process.hrtime.bigint();
      if (left <= 0n) break;
      await sleep(Math.max(1, Math.ceil(Number(left) / 1e6)), signal);
    }
    const st = native.reservationWait(this._r);
    if (st !== 0) throw failure(st, `reservation on '${this.limit.name}'`);
    return readDecision();
  }

  /** Give the tokens back if nothing was booked after them; false when they stay used. */
  cancel() {
    const st = native.reservationCancel(this._r);
    if (st === NOT_HELD) return false;
    if (st !== 0) throw failure(st, `cancel of a reservation on '${this.limit.name}'`);
    return true;
  }
}

module.exports = { Reservation };
