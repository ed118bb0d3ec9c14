/**
 * Calibrated thresholds (sdk/uvsdk/calibration.py): the manifest's `calibration` object (version
 * 2: each table names its `score` and the recording `conditions` it was measured in), the row a
 * FAR uses, and a user's threshold (spec §4.3): a table with genuine trials (prototype) gives the
 * row's threshold itself; a table without them (codeword) floors the warm-up rule,
 * `max(warm-up, row threshold)`; a row's threshold is never used below THRESHOLD_FLOOR.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { BundleError, CalibrationError } from "./errors.js";
import { canonicalJson, isInt, isNumber, isObject, type JsonValue } from "./json.js";
import { SCORE_RULES, type ScoreRuleName } from "./cohort.js";
import { num, quote, shown } from "./text.js";
import { hex } from "./bytes.js";
import { warmupThreshold, type Vector } from "./scoring.js";

export const VERSION = 2;
export const DEFAULT_FAR = 0.01;
export const MAX_FAR = 0.5;
/** A row needs `far × impostor_trials` of at least this. */
export const MIN_FALSE_ACCEPTS = 10;
export const MODES = ["prototype", "codeword"] as const;
export type Mode = (typeof MODES)[number];
/** What a table's thresholds are on: a score rule's scores (prototype), codeword scores. */
export const TABLE_SCORES: Record<Mode, readonly string[]> = { prototype: Object.keys(SCORE_RULES), codeword: ["codeword"] };
/** The thresholds a table of each score may hold. */
export const SCORE_RANGES: Record<string, readonly [number, number]> = {
  ...Object.fromEntries(Object.values(SCORE_RULES).map((rule) => [rule.name, rule.thresholdRange])),
  codeword: [-1, 1 + 1e-6],
};
/**
 * `THRESHOLD_FLOOR` (spec §4.3): the lowest calibrated threshold a user gets, whatever the
 * manifest says; chance on every score a table can hold, so an unsigned manifest whose rows say
 * -1 cannot enroll a user who accepts everyone.
 */
export const THRESHOLD_FLOOR = 0;
export const MAX_CONDITIONS = 32;
export const CONDITION_NAME = /^[a-z0-9][a-z0-9-]{0,31}$/;
/** What a prototype-mode score is: the raw cosine (no cohort) or its score_norm (a cohort). */
export type PrototypeScore = ScoreRuleName;

/** One FAR target: the threshold, what it measured there, and the trials behind it. */
export interface Row {
  far: number;
  threshold: number;
  falseAccepts: number;
  frr: number | null;
  falseRejects: number | null;
}

/** What one row's threshold did on recording chains it was not fitted on (calibration.HeldOutRow). */
export interface HeldOutRow {
  far: number;
  falseAccepts: number;
  impostorTrials: number;
  farLow: number;
  farHigh: number;
  falseRejects: number;
  genuineTrials: number;
  frrLow: number;
  frrHigh: number;
}

/** A prototype table's leave-one-chain-out figures (calibration.HeldOut; spec §3.6). */
export interface HeldOut {
  chains: number;
  minSeconds: number;
  rows: HeldOutRow[];
}

/**
 * What a held-out row means for the user, in words (uvsdk's `uvsdk enroll` line, less its
 * `--far` clause): "About 1 in 17 attempts by a stranger recorded like you would be accepted,
 * and about 1 in 5 of your own attempts of 2 s or more rejected (measured on people of 7
 * recording chains this threshold was not fitted on: 0.0 %-35 % and 5.4 %-55 % by chain".
 * The caller closes the parenthesis.
 */
export function heldOutSentence(row: HeldOutRow, chains: number, minSeconds: number): string {
  const about = (rate: number) => (rate > 0 ? `about 1 in ${Math.max(1, Math.round(1 / rate)).toLocaleString("en-US")}` : "almost none");
  const pct = (rate: number) => (rate >= 0.1 ? `${(100 * rate).toFixed(0)} %` : `${(100 * rate).toFixed(1)} %`);
  const accepted = about(row.falseAccepts / row.impostorTrials);
  return (
    `${accepted[0]!.toUpperCase()}${accepted.slice(1)} attempts by a stranger recorded like you would be accepted, ` +
    `and ${about(row.falseRejects / row.genuineTrials)} of your own attempts of ${num(minSeconds)} s or more rejected ` +
    `(measured on people of ${chains} recording chains this threshold was not fitted on: ` +
    `${pct(row.farLow)}-${pct(row.farHigh)} and ${pct(row.frrLow)}-${pct(row.frrHigh)} by chain`
  );
}

/** `HeldOut.row_for`: the held-out figures of the table row stating `far`, or null. */
export function heldOutRowFor(heldOut: HeldOut, far: number): HeldOutRow | null {
  return heldOut.rows.find((row) => Math.abs(row.far - far) <= 1e-12 * Math.max(1, far)) ?? null;
}

/** The calibration of one enrollment mode (calibration.Table). */
export interface Table {
  mode: Mode;
  people: number;
  enrollSamples: number;
  genuineTrials: number;
  impostorTrials: number;
  /** What the thresholds are on: "cosine", "as-norm" or "s-norm" (prototype), "codeword". */
  score: string;
  /** The recording conditions the table was measured in (each row holds in the worst of them). */
  conditions: string[];
  rows: Row[];
  /** Leave-one-chain-out figures of the rows (prototype tables; null when not measured). */
  heldOut: HeldOut | null;
}

/** The manifest's `calibration` (calibration.Calibration); `raw` is the object as parsed. */
export interface Calibration {
  version: number;
  data: string;
  tables: Partial<Record<Mode, Table>>;
  /** Hex SHA-256 of the RFC 8785 canonical JSON of its normalised form (calibrationSha256). */
  sha256: string;
}

/** `check_far`: `far` in (0, 0.5], else a CalibrationError. */
export function checkFar(far: unknown): number {
  if (typeof far !== "number" && typeof far !== "bigint") {
    throw new CalibrationError(`the FAR must be a number in (0, ${MAX_FAR}], not ${shown(far, 80)}`, "calibration.far-invalid");
  }
  const value = Number(far);
  if (!(Number.isFinite(value) && value > 0 && value <= MAX_FAR)) {
    throw new CalibrationError(
      `the FAR must be in (0, ${MAX_FAR}], not ${String(value)}`, "calibration.far-invalid",
    );
  }
  return value;
}

/**
 * `Table.row_for`: the row a requested FAR uses, the largest tabled FAR not above it (the
 * stricter side); a FAR below every row is a CalibrationError.
 */
export function rowFor(table: Table, far: number): Row {
  const value = checkFar(far);
  const usable = table.rows.filter((row) => row.far <= value * (1 + 1e-9));
  if (usable.length === 0) {
    const smallest = Math.min(...table.rows.map((row) => row.far));
    throw new CalibrationError(
      `the bundle's ${table.mode} calibration states FAR down to ${num(smallest)} ` +
        `(${table.impostorTrials} impostor trials); a FAR of ${num(value)} cannot be ` +
        "stated: choose a larger --far, or calibrate on more people",
    );
  }
  // max(usable, key=far): the first of equal maxima, as Python's max
  return usable.reduce((best, row) => (row.far > best.far ? row : best));
}

/**
 * `Table.expected`: the FAR and FRR the calibration expects at `threshold`, as short text
 * (interpolated between rows, the FAR log-linearly; bounded outside them).
 */
export function expected(table: Table, threshold: number): [string, string | null] {
  // sorted(rows, key=threshold): a stable sort, as Python's
  const rows = [...table.rows].sort((a, b) => a.threshold - b.threshold);
  const last = rows[rows.length - 1]!;
  const first = rows[0]!;
  if (threshold >= last.threshold) {
    const frr = last.frr === null ? null : `>= ${last.frr.toFixed(3)}`;
    return [threshold > last.threshold ? `< ${num(last.far)}` : num(last.far), frr];
  }
  if (threshold <= first.threshold) {
    const frr = first.frr === null ? null : `<= ${first.frr.toFixed(3)}`;
    return [`>= ${num(first.far)}`, frr];
  }
  for (let i = 0; i + 1 < rows.length; i++) {
    const low = rows[i]!;
    const high = rows[i + 1]!;
    if (low.threshold <= threshold && threshold <= high.threshold) {
      const span = high.threshold - low.threshold;
      const t = span <= 0 ? 0 : (threshold - low.threshold) / span;
      const far = Math.exp((1 - t) * Math.log(low.far) + t * Math.log(high.far));
      let frr: string | null = null;
      if (low.frr !== null && high.frr !== null) frr = ((1 - t) * low.frr + t * high.frr).toFixed(3);
      return [num(far, 2), frr];
    }
  }
  throw new Error("unreachable: rows bracket the threshold");
}

/** `Calibration.to_dict`: the normalised JSON form (what the SHA-256 is taken of). */
export function calibrationToDict(calibration: Pick<Calibration, "version" | "data" | "tables">): Record<string, unknown> {
  const out: Record<string, unknown> = { version: calibration.version, data: calibration.data };
  for (const mode of MODES) {
    const table = calibration.tables[mode];
    if (!table) continue;
    out[mode] = {
      people: table.people,
      enroll_samples: table.enrollSamples,
      genuine_trials: table.genuineTrials,
      impostor_trials: table.impostorTrials,
      score: table.score,
      conditions: [...table.conditions],
      rows: table.rows.map((row) => ({
        far: row.far,
        threshold: row.threshold,
        false_accepts: row.falseAccepts,
        frr: row.frr,
        false_rejects: row.falseRejects,
      })),
      ...(table.heldOut === null || table.heldOut === undefined ? {} : { held_out: heldOutToDict(table.heldOut) }),
    };
  }
  return out;
}

/** `HeldOut.to_dict`. */
export function heldOutToDict(heldOut: HeldOut): Record<string, unknown> {
  return {
    chains: heldOut.chains,
    min_seconds: heldOut.minSeconds,
    rows: heldOut.rows.map((row) => ({
      far: row.far,
      false_accepts: row.falseAccepts,
      impostor_trials: row.impostorTrials,
      far_low: row.farLow,
      far_high: row.farHigh,
      false_rejects: row.falseRejects,
      genuine_trials: row.genuineTrials,
      frr_low: row.frrLow,
      frr_high: row.frrHigh,
    })),
  };
}

/** `held_out.min_seconds` at most this. */
export const MAX_MIN_SECONDS = 60;
const HELD_OUT_ROW_KEYS = ["far", "false_accepts", "impostor_trials", "far_low", "far_high", "false_rejects", "genuine_trials", "frr_low", "frr_high"];

/** `_parse_held_out`: each row names a FAR of the table's rows, in their order; counts within their trials; each pooled rate within its chains' range. */
function parseHeldOut(spec: JsonValue, where: string, fars: number[]): HeldOut {
  if (!isObject(spec)) throw new BundleError(`manifest: ${where} must be an object`);
  const unknown = Object.keys(spec).filter((key) => !["chains", "min_seconds", "rows"].includes(key)).sort();
  if (unknown.length > 0) throw new BundleError(`manifest: ${where} has an unknown key ${quote(unknown[0])}`);
  const chains = count(spec["chains"], `${where}.chains`, 2);
  const minSeconds = number(spec["min_seconds"], `${where}.min_seconds`, 0, MAX_MIN_SECONDS);
  const rawRows = spec["rows"];
  if (!Array.isArray(rawRows) || rawRows.length === 0) throw new BundleError(`manifest: ${where}.rows must be a non-empty list`);
  const rows: HeldOutRow[] = [];
  rawRows.forEach((raw, index) => {
    const at = `${where}.rows[${index}]`;
    if (!isObject(raw)) throw new BundleError(`manifest: ${at} must be an object`);
    const extra = Object.keys(raw).filter((key) => !HELD_OUT_ROW_KEYS.includes(key)).sort();
    if (extra.length > 0) throw new BundleError(`manifest: ${at} has an unknown key ${quote(extra[0])}`);
    const far = number(raw["far"], `${at}.far`, 0, MAX_FAR);
    if (!fars.includes(far)) throw new BundleError(`manifest: ${at}.far ${num(far)} is not a FAR of the table's rows`);
    const part = (rate: string, errors: string, trials: string): [number, number, number, number] => {
      const total = count(raw[trials], `${at}.${trials}`, 1);
      const n = count(raw[errors], `${at}.${errors}`);
      if (n > total) throw new BundleError(`manifest: ${at}.${errors} exceeds ${trials}`);
      const lo = number(raw[`${rate}_low`], `${at}.${rate}_low`, 0, 1);
      const hi = number(raw[`${rate}_high`], `${at}.${rate}_high`, 0, 1);
      if (!(lo - 1e-9 <= n / total && n / total <= hi + 1e-9)) {
        throw new BundleError(`manifest: ${at}: the pooled ${rate} is not within ${rate}_low..${rate}_high`);
      }
      return [n, total, lo, hi];
    };
    const [falseAccepts, impostorTrials, farLow, farHigh] = part("far", "false_accepts", "impostor_trials");
    const [falseRejects, genuineTrials, frrLow, frrHigh] = part("frr", "false_rejects", "genuine_trials");
    rows.push({ far, falseAccepts, impostorTrials, farLow, farHigh, falseRejects, genuineTrials, frrLow, frrHigh });
  });
  const order = rows.map((row) => fars.indexOf(row.far));
  for (let i = 1; i < order.length; i++) {
    if (!(order[i]! > order[i - 1]!)) throw new BundleError(`manifest: ${where}.rows must follow the table's rows, each once`);
  }
  return { chains, minSeconds, rows };
}

/**
 * `Calibration.sha256`: hex SHA-256 of the RFC 8785 (JCS) canonical JSON of the calibration's
 * normalised form ({@link calibrationToDict}: keys the SDK does not read are not part of it).
 */
export function calibrationSha256(calibration: Pick<Calibration, "version" | "data" | "tables">): string {
  return hex(sha256(new TextEncoder().encode(canonicalJson(calibrationToDict(calibration)))));
}

function count(value: JsonValue | undefined, name: string, minimum = 0): number {
  if (!isInt(value) || value < BigInt(minimum)) {
    throw new BundleError(`manifest: ${name} must be an integer >= ${minimum}, not ${shown(value)}`);
  }
  return Number(value);
}

function number(value: JsonValue | undefined, name: string, low: number, high: number): number {
  if (!isNumber(value)) throw new BundleError(`manifest: ${name} must be a number, not ${shown(value)}`);
  const v = Number(value);
  if (!(Number.isFinite(v) && low <= v && v <= high)) {
    throw new BundleError(`manifest: ${name} must be finite and in [${num(low)}, ${num(high)}]`);
  }
  return v;
}

function parseConditions(value: JsonValue | undefined, where: string): string[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_CONDITIONS) {
    throw new BundleError(`manifest: ${where}.conditions must be a list of 1 to ${MAX_CONDITIONS}`);
  }
  for (const name of value) {
    if (typeof name !== "string" || !CONDITION_NAME.test(name)) {
      throw new BundleError(`manifest: ${where}.conditions: ${shown(name)} is not a condition name`);
    }
  }
  const names = value as string[];
  if (new Set(names).size !== names.length) {
    throw new BundleError(`manifest: ${where}.conditions names a condition twice`);
  }
  return [...names];
}

function parseTable(mode: Mode, spec: JsonValue | undefined, expectedScore: string): Table {
  const where = `calibration.${mode}`;
  if (!isObject(spec)) throw new BundleError(`manifest: ${where} must be an object`);
  const score = spec["score"];
  if (typeof score !== "string" || !TABLE_SCORES[mode].includes(score)) {
    throw new BundleError(
      `manifest: ${where}.score must be one of ${TABLE_SCORES[mode].join(", ")}, not ${shown(score)}`,
    );
  }
  if (score !== expectedScore) {
    throw new BundleError(
      `manifest: ${where} is calibrated on ${score} scores, and this bundle's ` +
        `${mode} scores are ${expectedScore} (its score_norm)`,
    );
  }
  const conditions = parseConditions(spec["conditions"], where);
  const [low, high] = SCORE_RANGES[score]!;
  const people = count(spec["people"], `${where}.people`, 2);
  const enroll = count(spec["enroll_samples"], `${where}.enroll_samples`);
  const genuine = count(spec["genuine_trials"], `${where}.genuine_trials`);
  const impostor = count(spec["impostor_trials"], `${where}.impostor_trials`, 1);
  if (mode === "prototype" && (enroll < 2 || genuine < 1)) {
    throw new BundleError(`manifest: ${where} needs enroll_samples >= 2 and genuine trials`);
  }
  const rawRows = spec["rows"];
  if (!Array.isArray(rawRows) || rawRows.length === 0) {
    throw new BundleError(`manifest: ${where}.rows must be a non-empty list`);
  }
  const rows: Row[] = [];
  rawRows.forEach((raw, index) => {
    const at = `${where}.rows[${index}]`;
    if (!isObject(raw)) throw new BundleError(`manifest: ${at} must be an object`);
    const far = number(raw["far"], `${at}.far`, 0, MAX_FAR);
    if (far <= 0) throw new BundleError(`manifest: ${at}.far must be > 0`);
    const threshold = number(raw["threshold"], `${at}.threshold`, low, high);
    const accepts = count(raw["false_accepts"], `${at}.false_accepts`);
    if (accepts > far * impostor + 1e-9) {
      throw new BundleError(
        `manifest: ${at}: ${accepts} false accepts of ${impostor} trials exceed FAR ${num(far)}`,
      );
    }
    if (far * impostor < MIN_FALSE_ACCEPTS - 1e-9) {
      throw new BundleError(
        `manifest: ${at}: FAR ${num(far)} of ${impostor} impostor trials is fewer than ` +
          `${MIN_FALSE_ACCEPTS} expected false accepts`,
      );
    }
    let frr: number | null = null;
    let rejects: number | null = null;
    const rawFrr = raw["frr"];
    const rawRejects = raw["false_rejects"];
    if (genuine) {
      frr = number(rawFrr, `${at}.frr`, 0, 1);
      rejects = count(rawRejects, `${at}.false_rejects`);
      if (rejects > genuine || Math.abs(rejects / genuine - frr) > 1e-6) {
        throw new BundleError(`manifest: ${at}: frr and false_rejects disagree`);
      }
    } else if ((rawFrr !== undefined && rawFrr !== null) || (rawRejects !== undefined && rawRejects !== null)) {
      throw new BundleError(`manifest: ${at}: an FRR without genuine trials`);
    }
    rows.push({ far, threshold, falseAccepts: accepts, frr, falseRejects: rejects });
  });
  for (let i = 0; i + 1 < rows.length; i++) {
    const before = rows[i]!;
    const after = rows[i + 1]!;
    if (!(after.far < before.far)) {
      throw new BundleError(`manifest: ${where}.rows must have strictly decreasing FAR`);
    }
    if (after.threshold < before.threshold) {
      throw new BundleError(`manifest: ${where}.rows: thresholds must not fall as the FAR falls`);
    }
    if (after.frr !== null && before.frr !== null && after.frr < before.frr) {
      throw new BundleError(`manifest: ${where}.rows: the FRR must not fall as the FAR falls`);
    }
  }
  let heldOut: HeldOut | null = null;
  const rawHeldOut = spec["held_out"];
  if (rawHeldOut !== undefined && rawHeldOut !== null) {
    if (mode !== "prototype") throw new BundleError(`manifest: ${where}.held_out is for the prototype table`);
    heldOut = parseHeldOut(rawHeldOut, `${where}.held_out`, rows.map((row) => row.far));
  }
  return {
    mode,
    people,
    enrollSamples: enroll,
    genuineTrials: genuine,
    impostorTrials: impostor,
    score,
    conditions,
    rows,
    heldOut,
  };
}

/** Python's `value == 2` for a parsed JSON value (2.0 equals 2 in Python; True does not). */
function isVersionTwo(value: JsonValue | undefined): boolean {
  return value === 2n || value === 2;
}

/**
 * `Calibration.from_dict`: validate the manifest's `calibration`; a problem is a BundleError
 * naming the key. `prototypeScore` is what the bundle's prototype scores are (its score_norm's
 * method, "cosine" without one): a prototype table measured on another score is refused.
 */
export function parseCalibration(
  data: JsonValue | undefined,
  outputKind = "embedding",
  prototypeScore: PrototypeScore = "cosine",
): Calibration {
  if (!isObject(data)) throw new BundleError("manifest: calibration must be an object");
  if (!isVersionTwo(data["version"])) {
    throw new BundleError(`manifest: calibration version ${shown(data["version"], 1000)} is not ${VERSION}`, "bundle.unsupported");
  }
  const description = data["data"];
  if (typeof description !== "string") throw new BundleError("manifest: calibration.data must be a string");
  const unknown = Object.keys(data)
    .filter((key) => !["version", "data", ...MODES].includes(key))
    .sort();
  if (unknown.length) {
    throw new BundleError(`manifest: calibration has unknown key(s) ${shown(unknown, 10000)}`);
  }
  const tables: Partial<Record<Mode, Table>> = {};
  for (const mode of MODES) {
    if (mode in data) {
      if (mode === "codeword" && outputKind !== "codeword") {
        throw new BundleError("manifest: calibration.codeword needs a codeword bundle (output.kind)");
      }
      tables[mode] = parseTable(mode, data[mode], mode === "prototype" ? prototypeScore : "codeword");
    }
  }
  if (Object.keys(tables).length === 0) {
    throw new BundleError("manifest: calibration has no table (prototype or codeword)");
  }
  const parsed = { version: VERSION, data: description, tables };
  return { ...parsed, sha256: calibrationSha256(parsed) };
}

/**
 * `floor`: the calibrated threshold for `mode` at `far` and its row, or null when there is no
 * calibration for the mode or `far` is null (the warm-up rule alone).
 */
export function floor(
  calibration: Calibration | null,
  mode: Mode,
  far: number | null,
): { threshold: number; row: Row } | null {
  const table = calibration?.tables[mode];
  if (far === null || !table) return null;
  const row = rowFor(table, far);
  return { threshold: row.threshold, row };
}

/**
 * `user_threshold` (spec §4.3): with a table for `mode` and a `far`, the table's threshold at
 * `far`, never below THRESHOLD_FLOOR, when the table has genuine trials (it states the FRR there),
 * else the warm-up rule at `targetTpr` floored at it; otherwise the warm-up rule alone. Returns the
 * row behind the threshold (null: the warm-up rule alone).
 */
export function userThreshold(
  warmupScores: Vector,
  targetTpr: number,
  calibration: Calibration | null,
  mode: Mode,
  far: number | null,
): { threshold: number; row: Row | null } {
  const threshold = warmupThreshold(warmupScores, targetTpr);
  const floored = floor(calibration, mode, far);
  if (floored === null) return { threshold, row: null };
  const calibrated = Math.max(floored.threshold, THRESHOLD_FLOOR);
  if (calibration!.tables[mode]!.genuineTrials > 0) return { threshold: calibrated, row: floored.row };
  return { threshold: Math.max(threshold, calibrated), row: floored.row };
}
