/**
 * Failed-attempt back-off (sdk/uvsdk/backoff.py): after `attempts` consecutive rejections the
 * user is locked out for `baseSeconds`, each further rejection multiplies it by `factor`, up to
 * `maxSeconds`; an acceptance resets the count. The state lives inside the encrypted template.
 */
import { LockedOutError } from "./errors.js";
import { quote } from "./text.js";

/** How many rejections are allowed before a lock-out, and how long it lasts (seconds). */
export class BackoffPolicy {
  readonly attempts: number;
  readonly baseSeconds: number;
  readonly factor: number;
  readonly maxSeconds: number;

  /** Defaults 5 attempts, 30 s, factor 2, 24 h; a RangeError (Python: ValueError) otherwise. */
  constructor(attempts = 5, baseSeconds = 30.0, factor = 2.0, maxSeconds = 24 * 3600.0) {
    const numbers = [baseSeconds, factor, maxSeconds];
    if (
      !Number.isInteger(attempts) ||
      !numbers.every((x) => typeof x === "number" && Number.isFinite(x)) ||
      !(1 <= attempts && attempts <= 1000) ||
      baseSeconds < 0 ||
      !(1 <= factor && factor <= 1000) ||
      !(0 <= maxSeconds && maxSeconds <= 10 * 365 * 86400)
    ) {
      throw new RangeError(
        "back-off needs 1 <= attempts <= 1000, base_seconds >= 0, 1 <= factor <= 1000 " +
          "and 0 <= max_seconds <= 10 years, all finite",
      );
    }
    this.attempts = attempts;
    this.baseSeconds = baseSeconds;
    this.factor = factor;
    this.maxSeconds = maxSeconds;
  }

  /**
   * `lockout_seconds`: `base · factor^(failures − attempts)` capped at `maxSeconds` (0 below
   * `attempts`), computed so that it never overflows.
   */
  lockoutSeconds(failures: number): number {
    if (failures < this.attempts) return 0;
    if (this.baseSeconds === 0 || this.maxSeconds === 0) return 0;
    const exponent = failures - this.attempts;
    if (this.factor > 1 && exponent * Math.log(this.factor) >= Math.log(this.maxSeconds / this.baseSeconds)) {
      return this.maxSeconds;
    }
    return Math.min(this.maxSeconds, this.baseSeconds * this.factor ** exponent);
  }
}

/** Consecutive rejections and the Unix time (seconds) until which verification is refused. */
export interface BackoffState {
  failures: number;
  lockedUntil: number;
}

/** The state of a user with no recent failure. */
export const CLEAR: BackoffState = Object.freeze({ failures: 0, lockedUntil: 0 });

/** A validated state (BackoffState.__post_init__): RangeError otherwise. */
export function backoffState(failures = 0, lockedUntil = 0): BackoffState {
  if (!Number.isInteger(failures) || failures < 0 || typeof lockedUntil !== "number" || !Number.isFinite(lockedUntil)) {
    throw new RangeError("back-off state needs failures >= 0 and a finite locked_until");
  }
  return { failures, lockedUntil };
}

/** `datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")`. */
export function localIso(seconds: number): string {
  const date = new Date(Math.floor(seconds) * 1000);
  const pad = (n: number) => String(Math.abs(n)).padStart(2, "0");
  const offset = -date.getTimezoneOffset();
  const sign = offset < 0 ? "-" : "+";
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}` +
    `${sign}${pad(Math.trunc(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`
  );
}

/** `check`: a LockedOutError while `now` is inside a lock-out. */
export function check(state: BackoffState, user: string, now: number): void {
  if (now < state.lockedUntil) {
    const inSeconds = state.lockedUntil - now;
    throw new LockedOutError(
      `user ${quote(user)} is locked out after ${state.failures} failed attempts: ` +
        `try again after ${localIso(state.lockedUntil)} (in ${inSeconds.toFixed(0)} s)`,
      state.lockedUntil,
    );
  }
}


/** `record`: the state after one scored attempt. */
export function record(state: BackoffState, policy: BackoffPolicy, accepted: boolean, now: number): BackoffState {
  if (accepted) return { failures: 0, lockedUntil: 0 };
  const failures = Math.min(state.failures + 1, 2 ** 31);
  const lockout = policy.lockoutSeconds(failures);
  return { failures, lockedUntil: lockout > 0 ? now + lockout : 0 };
}
