// Type declarations of the shmlimit package (lib/index.js, lib/middleware.js).
// Durations are milliseconds (fractions allowed); the library stores nanoseconds.

/// <reference types="node" />
import type { IncomingMessage, ServerResponse } from 'node:http';

export type Key = string | Uint8Array;

export interface KeyedOptions {
  /** Key slots (rounded up to a power of two). */
  capacity: number;
  /** When the table has no slot for a new key: deny (default), allow unlimited, or throw TableFullError. */
  onFull?: 'deny' | 'allow' | 'error';
}

export interface CommonOptions {
  /** One state per key, in a table of this many slots (or the full options). */
  keyed?: number | KeyedOptions;
  /** Dry run: never deny; `shadowDenied` and the stats say what would have been denied. */
  shadow?: boolean;
  /** Admissions leaving less than this fraction of the capacity count in `stats().nearLimit`. */
  nearLimit?: number;
}

export interface TokenBucketOptions extends CommonOptions {
  /** Tokens per `per` ms. */
  rate: number;
  /** The refill period in ms (default 1000). */
  per?: number;
  /** The capacity (default `rate`). */
  burst?: number;
  /** Split into 2 to 64 sub-buckets, for limits many CPUs hit at once (unkeyed only). */
  split?: number;
  /** This host's share (weight) of a fleet-wide rate. */
  fleet?: { rate: number; per?: number; weight?: number };
}

export interface WindowOptions extends CommonOptions {
  limit: number;
  /** The window in ms. */
  window: number;
  /** Window boundaries on the wall clock (default) or on the monotonic clock. */
  aligned?: 'wall' | 'monotonic';
}

export interface SlidingLogOptions extends CommonOptions {
  limit: number;
  window: number;
}

export interface ConcurrencyOptions {
  permits: number;
  /** A permit held longer than this (ms) is reclaimable; default none. */
  lease?: number | null;
  keyed?: number | KeyedOptions;
  shadow?: boolean;
}

export interface TokenBucketDefinition extends Omit<TokenBucketOptions, 'keyed'> {
  kind: 'tokenBucket';
  per: number;
  burst: number;
  keyed?: KeyedOptions;
}
export interface FixedWindowDefinition extends Omit<WindowOptions, 'keyed'> {
  kind: 'fixedWindow';
  aligned: 'wall' | 'monotonic';
  keyed?: KeyedOptions;
}
export interface SlidingWindowDefinition extends Omit<WindowOptions, 'keyed'> {
  kind: 'slidingWindow';
  aligned: 'wall' | 'monotonic';
  keyed?: KeyedOptions;
}
export interface SlidingLogDefinition extends Omit<SlidingLogOptions, 'keyed'> {
  kind: 'slidingLog';
  keyed?: KeyedOptions;
}
export interface ConcurrencyDefinition extends Omit<ConcurrencyOptions, 'keyed'> {
  kind: 'concurrency';
  lease: number | null;
  keyed?: KeyedOptions;
}
export interface AdaptiveConcurrencyOptions {
  /** The smallest limit (and the starting one). */
  min: number;
  /** The largest limit (at most 65535; at most 64 for a keyed limit). */
  max: number;
  /** One adaptive limit per key, each learning from its own releases, in a table of this
   *  many slots (or the full options); permits are then taken with a key. */
  keyed?: number | KeyedOptions;
  /** Milliseconds after which a held permit becomes reclaimable (default: no lease). */
  lease?: number | null;
  /** The limit of a fresh state, within [min, max] (default: min). */
  initial?: number;
  /** The update window, whole milliseconds (default 20): the limit moves at most once per window. */
  window?: number;
  /** Smoothing of each update, in [0.0001, 0.9999] (default 0.2). */
  smoothing?: number;
  /** Tolerance of the latency gradient, in [1, 15] (default 1.0). */
  tolerance?: number;
  /** Headroom, the queue the gradient adds as a fraction of the limit, in [0, 0.9999] (default 0.1). */
  headroom?: number;
  /** Backoff after a window with errors or timeouts, in [0.0001, 0.9999] (default 0.9). */
  backoff?: number;
}
export interface AdaptiveConcurrencyDefinition extends AdaptiveConcurrencyOptions {
  kind: 'adaptiveConcurrency';
  lease: number | null;
}
export type Definition =
  | TokenBucketDefinition
  | FixedWindowDefinition
  | SlidingWindowDefinition
  | SlidingLogDefinition
  | ConcurrencyDefinition
  | AdaptiveConcurrencyDefinition
  | CountersDefinition;

export function tokenBucket(options: TokenBucketOptions): TokenBucketDefinition;
export function fixedWindow(options: WindowOptions): FixedWindowDefinition;
export function slidingWindow(options: WindowOptions): SlidingWindowDefinition;
export function slidingLog(options: SlidingLogOptions): SlidingLogDefinition;
export function concurrency(options: ConcurrencyOptions): ConcurrencyDefinition;
export function adaptiveConcurrency(options: AdaptiveConcurrencyOptions): AdaptiveConcurrencyDefinition;

/** How a request under an adaptive permit ended. */
export type Outcome = 'ok' | 'error' | 'timeout' | 'dropped';

/** A held permit of an adaptive concurrency limit. */
export class AdaptivePermit {
  private constructor();
  readonly limit: Limit;
  readonly held: boolean;
  /** What disposing it (`using`) reports; unset: 'dropped'. */
  outcome: Outcome | undefined;
  /** Release it reporting `outcome` and the time since its grant (or `latency` ms); false when
   *  it was released already. */
  release(outcome?: Outcome, options?: { latency?: number }): boolean;
  [Symbol.dispose](): void;
}

/** What an adaptive concurrency limit is doing now. */
export interface AdaptiveStatus {
  limit: number;
  permits: number;
  min: number;
  max: number;
  inFlight: number;
  rttLongUs: number | null;
  rttRecentUs: number | null;
}

/** The outcome of one decision. */
export class Decision {
  private constructor();
  /** Admitted (and, except for a peek, the cost consumed). */
  readonly allowed: boolean;
  /** Units that could still be admitted right now. */
  readonly remaining: number;
  /** Milliseconds until the same request could be admitted (0 when allowed). */
  readonly retryAfterMs: number;
  /** Milliseconds until the limit is whole again. */
  readonly resetMs: number;
  /** A shadow limit would have denied (allowed anyway). */
  readonly shadowDenied: boolean;
  readonly retryAfterNs: number;
  readonly resetAfterNs: number;
}

export interface Stats {
  allowed: number;
  denied: number;
  shadowDenied: number;
  nearLimit: number;
  /** Grants given back whole (refunds, composed roll-backs): `allowed - refunded` passed. */
  refunded: number;
}

export interface Policy {
  /** `q`: units granted per window. */
  quota: number;
  /** `w`: the window in whole seconds. */
  windowSecs: number;
}

export interface WaitOptions {
  /** Give up after this many ms (default: wait as long as it takes). */
  timeout?: number;
  signal?: AbortSignal;
}

export interface PermitHolder {
  id: bigint;
  pid: number;
  reclaimable: boolean;
  sinceNs: bigint;
  leaseExpiryNs: bigint;
  keyTag: bigint;
}

/** A held permit of a concurrency limit. */
export class Permit {
  private constructor();
  readonly id: bigint;
  readonly limit: Limit;
  readonly key: Key | undefined;
  readonly released: boolean;
  /** Give it back; false when it was no longer held. */
  release(): boolean;
}

/** Tokens of a token bucket booked in turn across processes. */
export class Reservation {
  private constructor();
  readonly limit: Limit;
  readonly delayMs: number;
  /** When the caller may proceed, on CLOCK_MONOTONIC (as process.hrtime.bigint()). */
  readonly readyAtNs: bigint;
  /** Sleeps on timers until the booking's time; resolves its grant. */
  wait(options?: { signal?: AbortSignal }): Promise<Decision>;
  /** Gives the tokens back if nothing was booked after them. */
  cancel(): boolean;
}

/** One limit of a limiter file. */
export class Limit {
  private constructor();
  readonly name: string;
  tryAcquire(cost?: number): Decision;
  peek(cost?: number): Decision;
  tryAcquireKey(key: Key, cost?: number): Decision;
  peekKey(key: Key, cost?: number): Decision;
  /** Waits on timers for each denial's retry-after; resolves the denial if the timeout would pass first. */
  acquire(cost?: number, options?: WaitOptions): Promise<Decision>;
  acquireKey(key: Key, cost?: number, options?: WaitOptions): Promise<Decision>;
  /** Books `cost` tokens of an unkeyed token bucket if ready within `maxDelay` ms (default 0). */
  reserve(cost?: number, options?: { maxDelay?: number }): Reservation | null;
  /** Waits in turn with every other process (a reservation); null when it would exceed the timeout. */
  acquireInTurn(cost?: number, options?: WaitOptions): Promise<Decision | null>;
  refund(decision: Decision, units?: number): void;
  refundKey(key: Key, decision: Decision): void;
  stats(): Stats;
  /** The live definition (after any retune or adopted change): what decisions use now. */
  definition(): Definition;
  /** The same as `definition()`: the live parameters. */
  liveDefinition(): Definition;
  /** The definition the file was created with, before any retune. */
  createdDefinition(): Definition;
  policy(): Policy;
  setRate(rate: number, per?: number): void;
  setTokenBucket(burst: number, rate: number, per?: number): void;
  setLimit(limit: number): void;
  reset(): void;
  keyOccupancy(): { used: number; slots: number };
  reclaimIdleKeys(): number;
  keyTag(key: Key): bigint;
  /** `key`: for a keyed adaptive limit, the key whose own limit decides. */
  tryAcquireAdaptive(key?: Key): AdaptivePermit | null;
  acquireAdaptive(options?: { timeout?: number; signal?: AbortSignal; key?: Key }): Promise<AdaptivePermit | null>;
  withAdaptive<T>(fn: () => T | Promise<T>, options?: { timeout?: number; signal?: AbortSignal; key?: Key }): Promise<T>;
  adaptiveStatus(key?: Key): AdaptiveStatus;
  tryAcquirePermit(): Permit | null;
  tryAcquireKeyPermit(key: Key): Permit | null;
  /** Resolves null when the timeout passed with every permit held. */
  acquirePermit(options?: WaitOptions): Promise<Permit | null>;
  acquireKeyPermit(key: Key, options?: WaitOptions): Promise<Permit | null>;
  /** Rejects with PermitUnavailableError when no permit came within the timeout. */
  withPermit<T>(fn: (permit: Permit) => T | Promise<T>, options?: WaitOptions): Promise<T>;
  withKeyPermit<T>(key: Key, fn: (permit: Permit) => T | Promise<T>, options?: WaitOptions): Promise<T>;
  keyPermitsHeld(key: Key): number;
  permitHolders(): PermitHolder[];
  reclaimDeadPermits(): number;
  close(): void;
}

/** A decision of a guarded limit. */
export interface GuardedDecision extends Decision {
  /** The file (or the limit's state) was unavailable: the policy decided. */
  readonly unavailable: boolean;
}

export type UnavailablePolicy = 'failOpen' | 'failClosed';

/** One limit of a guarded limiter. */
export class GuardedLimit {
  private constructor();
  readonly name: string;
  readonly policy: UnavailablePolicy;
  tryAcquire(cost?: number): GuardedDecision;
  peek(cost?: number): GuardedDecision;
  tryAcquireKey(key: Key, cost?: number): GuardedDecision;
  refund(decision: Decision): void;
  close(): void;
}

/** A limiter file attached when it can be opened; each limit's policy decides until then. */
export class GuardedLimiter {
  private constructor();
  readonly path: string;
  static open(path: string, options?: { reopenEvery?: number }): GuardedLimiter;
  attached(): boolean;
  limit(name: string, policy: UnavailablePolicy): GuardedLimit;
  close(): void;
}

export interface OpenOptions {
  /** Permission bits of a created file (default 0o600), and the most an opened one may grant. */
  mode?: number;
  /** Accept a file owned by another user. */
  allowOtherOwner?: boolean;
  /** `createOrOpen` on a file with other definitions: throw `DefinitionConflictError`
   *  (`'refuse'`, the default) or adopt them (`'adopt'`: a live retune when the file's layout
   *  holds the change, else an atomic replacement that attached processes follow). */
  onConflict?: 'refuse' | 'adopt';
  /** What a created file does at a reboot: translate its stored times (the default: quotas
   *  used before the reboot stay used) or reset every limit; for an existing file, it must be
   *  the file's choice. */
  onReboot?: 'translate' | 'reset';
}

/** One limiter file. */
export class Limiter {
  private constructor();
  readonly path: string;
  static createOrOpen(path: string, definitions: Record<string, Definition>, options?: OpenOptions): Limiter;
  static open(path: string, options?: OpenOptions): Limiter;
  /** Attach when the file can be opened (retrying every `reopenEvery` ms, default 1000). */
  static openGuarded(path: string, options?: { reopenEvery?: number }): GuardedLimiter;
  limit(name: string): Limit;
  /** The live definitions (after any retune or adopted change): what decisions use now. */
  definitions(): Record<string, Definition>;
  /** The definitions the file was created with, before any retune. */
  createdDefinitions(): Record<string, Definition>;
  close(): void;
}

/** A limit, `[limit, cost]`, or `[keyedLimit, cost, key]`. */
export type Check = Limit | [Limit, number] | [Limit, number, Key];

/** The outcome of a composed check. */
export class Composed {
  private constructor();
  readonly allowed: boolean;
  /** The index of the first limit that denied; -1 when allowed. */
  readonly deniedBy: number;
  readonly retryAfterMs: number;
  readonly retryAfterNs: number;
  readonly decisions: Decision[];
  readonly limits: Limit[];
  refund(): void;
}

export function tryAcquireAll(checks: Check[]): Composed;
export function acquireAll(checks: Check[], options?: WaitOptions): Promise<Composed>;

/** A check of a prepared composition: a limit (cost 1, unkeyed), or its cost and whether it is
 *  keyed (each decision then passes its key). */
export type PreparedCheck = Limit | { limit: Limit; cost?: number; keyed?: boolean };

/** A composed check prepared once (`prepareAll`): its limits and costs are fixed, and each
 *  decision passes only the keys of its keyed checks. Every outcome is tryAcquireAll's. */
export class PreparedAll {
  private constructor();
  readonly limits: readonly Limit[];
  readonly costs: readonly number[];
  /** The indices of the keyed checks: `tryAcquire` takes one key for each, in this order. */
  readonly keyedAt: readonly number[];
  /** All or nothing over the prepared checks, one key per keyed check in order. Throws a
   *  TypeError for a wrong number of keys or a key that is not a string or bytes, a
   *  ClosedError naming a limit closed since (nothing consumed either way). */
  tryAcquire(...keys: Key[]): Composed;
  /** Wait on timers until the prepared checks admit at once, as `acquireAll` does: the keys as
   *  `tryAcquire` takes them, optionally followed by `{timeout, signal}`. Resolves the Composed
   *  admitted, or the last denial once the next retry would pass the timeout; rejects with
   *  tryAcquire's errors (naming `acquire`, nothing consumed) or the signal's reason. */
  acquire(...keys: Key[]): Promise<Composed>;
  acquire(...keysThenOptions: [...keys: Key[], options: WaitOptions | undefined]): Promise<Composed>;
}

/** Prepare a composed check of 1 to 8 limits once. */
export function prepareAll(checks: PreparedCheck[]): PreparedAll;

export interface RateLimitHeaders {
  RateLimit?: string;
  'RateLimit-Policy'?: string;
  'Retry-After'?: string;
}
export function rateLimitHeaders(pairs: Array<[Limit, Decision]>): RateLimitHeaders;

export const version: string;

export class ShmlimitError extends Error {
  /** The C status name, e.g. 'SHMLIMIT_WRONG_KIND' ('SHMLIMIT_CLOSED' for a closed handle). */
  readonly code: string;
  /** The C status code (-1 for a closed handle). */
  readonly status: number | string;
  /** The OS errno of an IoError. */
  readonly errno?: number;
}
// <generated: error classes>
/** `SHMLIMIT_NULL_POINTER`: a required pointer argument was NULL. */
export class NullPointerError extends ShmlimitError {}
/** `SHMLIMIT_BAD_UTF8`: a limit name was not valid UTF-8. */
export class BadUtf8Error extends ShmlimitError {}
/** `SHMLIMIT_INTERNAL`: internal error (a bug in shmlimit was caught). */
export class InternalError extends ShmlimitError {}
/** `SHMLIMIT_BAD_LENGTH`: a length argument was impossible. */
export class BadLengthError extends ShmlimitError {}
/** `SHMLIMIT_MISALIGNED_POINTER`: a pointer argument was misaligned. */
export class MisalignedPointerError extends ShmlimitError {}
/** `SHMLIMIT_OUT_OF_RANGE`: an index argument was out of range. */
export class OutOfRangeError extends ShmlimitError {}
/** `SHMLIMIT_IO`: an operating-system call failed. */
export class IoError extends ShmlimitError {}
/** `SHMLIMIT_SYMLINK`: the path is a symbolic link. */
export class SymlinkError extends ShmlimitError {}
/** `SHMLIMIT_NOT_REGULAR_FILE`: the path is not a regular file. */
export class NotRegularFileError extends ShmlimitError {}
/** `SHMLIMIT_PERMISSION`: the file's owner or mode is not acceptable. */
export class PermissionDeniedError extends ShmlimitError {}
/** `SHMLIMIT_FOREIGN`: not a shmlimit file. */
export class ForeignFileError extends ShmlimitError {}
/** `SHMLIMIT_VERSION`: incompatible file format version. */
export class VersionError extends ShmlimitError {}
/** `SHMLIMIT_SIZE`: the file's size disagrees with its header. */
export class SizeError extends ShmlimitError {}
/** `SHMLIMIT_CORRUPT`: the file's header or definitions are corrupt. */
export class CorruptFileError extends ShmlimitError {}
/** `SHMLIMIT_NOT_INITIALIZED`: the file was never fully initialised. */
export class NotInitializedError extends ShmlimitError {}
/** `SHMLIMIT_CLOCK_MISMATCH`: the file belongs to another time namespace. */
export class ClockMismatchError extends ShmlimitError {}
/** `SHMLIMIT_DEFINITION_CONFLICT`: the file holds other limit definitions. */
export class DefinitionConflictError extends ShmlimitError {}
/** `SHMLIMIT_INVALID_PARAMETER`: invalid limit definition or parameter. */
export class InvalidParameterError extends ShmlimitError {}
/** `SHMLIMIT_UNKNOWN_LIMIT`: no limit of that name. */
export class UnknownLimitError extends ShmlimitError {}
/** `SHMLIMIT_ZERO_COST`: a cost must be at least 1. */
export class ZeroCostError extends ShmlimitError {}
/** `SHMLIMIT_COST_EXCEEDS_CAPACITY`: the cost exceeds the limit's capacity. */
export class CostExceedsCapacityError extends ShmlimitError {}
/** `SHMLIMIT_CORRUPT_STATE`: the limit's shared state is corrupt. */
export class CorruptStateError extends ShmlimitError {}
/** `SHMLIMIT_CLOCK_OUT_OF_RANGE`: the clock is outside the representable range. */
export class ClockOutOfRangeError extends ShmlimitError {}
/** `SHMLIMIT_TABLE_FULL`: the keyed limit's table is full. */
export class TableFullError extends ShmlimitError {}
/** `SHMLIMIT_INVALID_KEY`: invalid key. */
export class InvalidKeyError extends ShmlimitError {}
/** `SHMLIMIT_WRONG_KIND`: the operation does not apply to this kind of limit. */
export class WrongKindError extends ShmlimitError {}
/** `SHMLIMIT_CLOSED`: the handle is closed. */
export class ClosedError extends ShmlimitError {}
/** `SHMLIMIT_PERMIT_UNAVAILABLE`: no permit came within the timeout. */
export class PermitUnavailableError extends ShmlimitError {}
// </generated>

// ---- Middleware ----

export interface LimitEntry<Req> {
  limit: Limit;
  /** For a keyed limit: the request's key (default: the client address; required, here or in
   *  the options, for a keyed adaptive concurrency limit, whose permit is held per key). */
  key?: (req: Req) => Key | null | undefined;
  cost?: number | ((req: Req) => number);
}

export interface RequestDecision {
  allowed: boolean;
  decisions: Decision[];
  headers: RateLimitHeaders;
}

export interface MiddlewareOptions<Req = IncomingMessage, Res = ServerResponse> {
  limits: Limit | Array<Limit | LimitEntry<Req>>;
  key?: (req: Req) => Key | null | undefined;
  cost?: number | ((req: Req) => number);
  /** `RateLimit` and `RateLimit-Policy` on every response (default true). */
  headers?: boolean;
  /** Default 429. */
  statusCode?: number;
  /** The denial's body. */
  message?: string;
  skip?: (req: Req) => boolean;
  onLimited?: (req: Req, res: Res, result: RequestDecision) => void;
}

export function middleware<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse>(
  options: MiddlewareOptions<Req, Res>,
): (req: Req, res: Res, next?: (err?: unknown) => void) => void;

/** The middleware's decision for one request, all or nothing over `limits` (a Limit, or an
 *  array of Limits or `{limit, key, cost}` entries, with `key` and `cost` defaults as in
 *  `middleware`), without answering it. */
export function decideRequest<Req = IncomingMessage>(
  options: Pick<MiddlewareOptions<Req>, 'limits' | 'key' | 'cost'>,
  req: Req,
): RequestDecision;

/** A Fastify plugin (`fastify.register(fastifyPlugin, options)`); typed loosely so that this
 *  package does not depend on Fastify's types. */
export function fastifyPlugin(fastify: any, options: MiddlewareOptions<any, any>, done: (err?: Error) => void): void;

declare module 'node:http' {
  interface IncomingMessage {
    /** Set by the shmlimit middleware. */
    rateLimit?: RequestDecision;
  }
}

// Keyed counters (lib/counters.js): the window and the limit come with each call.

export interface CountersOptions {
  /** Key slots (required). */
  keyed: number | KeyedOptions;
  /** Log entries per key: the largest moving-window limit the file holds (default 128). */
  movingWindow?: number;
}
export interface CountersDefinition {
  kind: 'counters';
  movingWindow: number;
  keyed: KeyedOptions;
}
/** Keyed counters whose window and limit come with each call (`Counters`). */
export function counters(options: CountersOptions): CountersDefinition;

export interface CountersOpenOptions {
  /** The limit's name in the file (default 'counters'). */
  name?: string;
  /** Key slots of a created file (default 16384). */
  keys?: number;
  /** Log entries per key of a created file (default 128). */
  movingWindow?: number;
  onFull?: 'deny' | 'allow' | 'error';
  /** Permission bits of a created file (default 0o600). */
  mode?: number;
  /** A file created with other options: throw DefinitionConflictError ('refuse', the
   *  default) or replace it atomically with one holding these ('adopt'). */
  onConflict?: 'refuse' | 'adopt';
}

/** The calls of a counters limit; windows in ms, every call exact per key across processes. */
export class Counters {
  constructor(limit: Limit);
  /** Attach an existing file as it is (no sizing options), or create / check it with them. */
  static open(path: string, options?: CountersOpenOptions): Counters;
  readonly name: string;
  /** The largest moving-window limit of the file. */
  readonly maxMovingLimit: number;
  /** Key slots of the file. */
  readonly keys: number;
  /** The limiter `open` attached (undefined for `new Counters(limit)`). */
  limiter?: Limiter;
  /** Add `amount` to the key's fixed-window counter; returns its count (Infinity: a full table denies). */
  incr(key: Key, windowMs: number, amount?: number): number;
  /** `incr`, and the ms until the key's window ends as read right after it (0 when it ended in between). */
  incrWithReset(key: Key, windowMs: number, amount?: number): { count: number; resetMs: number };
  /** Take `amount` from the key's fixed-window counter (never below zero); returns its count. */
  decr(key: Key, amount?: number): number;
  /** The key's counter holds `count` in a window of `windowMs` from now. */
  set(key: Key, windowMs: number, count: number): number;
  count(key: Key): { count: number; resetMs: number };
  fixed(key: Key, limit: number, windowMs: number, cost?: number): Decision;
  sliding(key: Key, limit: number, windowMs: number, cost?: number): Decision;
  moving(key: Key, limit: number, windowMs: number, cost?: number): Decision;
  slidingCounts(key: Key, windowMs: number): { previous: number; previousWeighsMs: number; current: number; currentExpiresMs: number };
  movingCounts(key: Key, limit: number, windowMs: number): { count: number; oldestAgeMs: number };
  clear(key: Key): void;
  /** Forget every key; returns how many held something. */
  clearAll(): number;
}
