/**
 * Score normalisation against an impostor cohort shipped in the bundle
 * (sdk/uvsdk/cohort.py; docs/spec.md §3.9, §6.7).
 *
 * The bundle may carry `cohort.f32`: `count` vectors of `dim` little-endian float32 values of
 * people who are not the users (a model output, no secret), named by the manifest's `cohort`
 * object `{file, count, sha256}`, and then declares its rule in `score_norm`:
 * `{method: "as-norm", top_k}` (each vector's `top_k` nearest cohort vectors) or
 * `{method: "s-norm"}` (all of them). The statistics of a vector `x` are the mean `μ(x)` and
 * the population standard deviation `σ(x)` (floored at 1e-6) of those cosines with the cohort;
 * the normalised score of a test vector `t` against a prototype `p` is
 * `½ · ((s − μ(p)) / σ(p) + (s − μ(t)) / σ(t))`, `s = cos(p, t)`.
 *
 * `score_norm` may also carry a `centre` (spec version 9, §3.9 and §6.8): the mean unit
 * embedding of the people of the recording chain the bundle is deployed on (`centre.f32`),
 * taken out of every prototype-mode vector first: `c(z) = rescale(rescale(z, 1) − m, 1)`.
 * Without a cohort the rule is then `{method: "cosine", centre: {file, people, sha256}}`.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { BundleError } from "./errors.js";
import { hex } from "./bytes.js";
import { isInt, isObject, type JsonObject, type JsonValue } from "./json.js";
import { quote } from "./text.js";
import { leaveOneOutPairs, leaveOneOutScores, rescale, type Vector } from "./scoring.js";

export const COHORT_FILE = "cohort.f32";
export const CENTRE_FILE = "centre.f32";
/** `centre.f32`'s size limit (one vector of at most 65,536 float32 values), checked before it is read. */
export const MAX_CENTRE_BYTES = 4 * 65536;
export const MAX_CENTRE_PEOPLE = 2 ** 31 - 1;
/** At most this many cohort vectors. */
export const MAX_COHORT_COUNT = 16384;
/** The member's size limit (16 MiB), checked before it is read. */
export const MAX_COHORT_BYTES = 16 * 1024 * 1024;
/** σ is floored here, so a degenerate cohort cannot divide by zero. */
export const MIN_STD = 1e-6;
const SHA256_HEX = /^[0-9a-f]{64}$/;
/** `cohort.RESCALE_EPSILON`: the least norm a vector is rescaled by (spec §6.1); a cohort vector must reach it. */
export const RESCALE_EPSILON = 1e-12;

/** The statistics of one vector against the cohort: mean and (floored) standard deviation. */
export interface CohortStatistics {
  mean: number;
  std: number;
}

/**
 * A score rule (spec §6.7; cohort.ScoreRule): a name and a parameter, and how a raw cosine
 * becomes the score a threshold is set on. The rules are the objects of {@link SCORE_RULES};
 * adding one is one object here (and its twin in sdk/uvsdk/cohort.py), its manifest spelling in
 * spec §3.9 and §6.7, and a conformance bundle made under it.
 */
export interface ScoreRule {
  /** `score_norm.method` in the manifest, and the `score` of a calibration table. */
  readonly name: string;
  /** Whether it normalises against the bundle's cohort (every rule but the raw cosine). */
  readonly usesCohort: boolean;
  /** Where a calibrated threshold on these scores may lie. */
  readonly thresholdRange: readonly [number, number];
  /** The scale its scores are on, as a person reads it (the web page's verdict). */
  readonly scale: string;
  /** Its parameter from the manifest's `score_norm`, validated for a cohort of `count` (null: none). */
  topK(data: JsonObject, count: number): number | null;
  /** How many of the highest cohort cosines each statistic takes (null: every one). */
  nearest(topK: number | null): number | null;
  /** One plain phrase for `info`. */
  describe(topK: number | null, count: number): string;
  /** The score from the raw cosine and the cohort statistics of both sides. */
  normalise(score: number, enrolled: CohortStatistics, tested: CohortStatistics): number;
}

const thousands = (n: number) => n.toLocaleString("en-US");

/** No normalisation: the cosine itself (a bundle without a cohort). */
const RAW_COSINE: ScoreRule = {
  name: "cosine",
  usesCohort: false,
  thresholdRange: [-1, 1 + 1e-6],
  scale: "cosine scores run from −1 to 1",
  topK: () => null,
  nearest: (topK) => topK,
  describe: () => "raw cosines",
  normalise: (score) => score,
};

/** AS-norm: each side's statistics over its `top_k` nearest cohort vectors. */
const ADAPTIVE_SYMMETRIC_NORM: ScoreRule = {
  name: "as-norm",
  usesCohort: true,
  thresholdRange: [-1000, 1000],
  scale: "in standard deviations of strangers' scores",
  topK: (data, count) => integer(data["top_k"], "score_norm.top_k", 2, count),
  nearest: (topK) => topK,
  describe: (topK, count) => `AS-norm over the ${thousands(topK!)} nearest of ${thousands(count)} cohort vectors`,
  normalise: (score, enrolled, tested) => asNorm(score, enrolled, tested),
};

/** S-norm: AS-norm over the whole cohort (WeSpeaker's `top_n` at the cohort's size). */
const SYMMETRIC_NORM: ScoreRule = {
  ...ADAPTIVE_SYMMETRIC_NORM,
  name: "s-norm",
  topK: (data) => {
    if ("top_k" in data) throw new BundleError("manifest: score_norm.top_k is for as-norm (s-norm uses all)");
    return null;
  },
  nearest: () => null,
  describe: (_, count) => `S-norm over all ${thousands(count)} cohort vectors`,
};

/** Every score rule by name: what a calibration table's prototype `score` may be. */
export const SCORE_RULES = { cosine: RAW_COSINE, "as-norm": ADAPTIVE_SYMMETRIC_NORM, "s-norm": SYMMETRIC_NORM } as const;
/** A score rule's name: what prototype-mode scores are. */
export type ScoreRuleName = keyof typeof SCORE_RULES;
/** A score normalisation a bundle may declare (`score_norm.method`): a rule with a cohort. */
export type ScoreNormMethod = Exclude<ScoreRuleName, "cosine">;
/** The score normalisations a bundle may declare, in the order of {@link SCORE_RULES}. */
export const SCORE_NORMS = Object.values(SCORE_RULES)
  .filter((rule) => rule.usesCohort)
  .map((rule) => rule.name) as readonly ScoreNormMethod[];

/** The manifest's `cohort` object, validated (cohort.CohortSpec). */
export interface CohortSpec {
  count: number;
  /** Hex SHA-256 of the member cohort.f32. */
  sha256: string;
}

/** `score_norm.centre` (cohort.CentreSpec): the member's digest and how many people its mean is of. */
export interface CentreSpec {
  people: number;
  /** Hex SHA-256 of the member centre.f32. */
  sha256: string;
}

/**
 * The manifest's `score_norm` (cohort.ScoreNorm): `topK` null for s-norm (all vectors) and
 * cosine; `cosine` (no cohort) only with a `centre`, which any rule may carry (null: none).
 */
export interface ScoreNorm {
  method: ScoreRuleName;
  topK: number | null;
  centre: CentreSpec | null;
}

function integer(value: JsonValue | undefined, name: string, low: number, high: number): number {
  if (!isInt(value) || value < BigInt(low) || value > BigInt(high)) {
    throw new BundleError(`manifest: ${name} must be an integer in [${low}, ${high}]`);
  }
  return Number(value);
}

/** `CohortSpec.from_dict`: the manifest's `cohort`; a problem is a BundleError naming the key. */
export function parseCohortSpec(data: JsonValue | undefined): CohortSpec {
  if (!isObject(data)) throw new BundleError("manifest: cohort must be an object");
  if ("top_k" in data) {
    throw new BundleError(
      "manifest: cohort.top_k is score_norm.top_k since spec version 4 (re-calibrate the bundle with uvexport calibrate)",
    );
  }
  const unknown = Object.keys(data)
    .filter((key) => !["file", "count", "sha256"].includes(key))
    .sort();
  if (unknown.length > 0) throw new BundleError(`manifest: cohort has an unknown key ${quote(unknown[0])}`);
  if (data["file"] !== COHORT_FILE) throw new BundleError(`manifest: cohort.file must be ${quote(COHORT_FILE)}`);
  const count = integer(data["count"], "cohort.count", 2, MAX_COHORT_COUNT);
  const sha = data["sha256"];
  if (typeof sha !== "string" || !SHA256_HEX.test(sha)) {
    throw new BundleError("manifest: cohort.sha256 is not 64 lowercase hex digits");
  }
  return { count, sha256: sha };
}

/** `CohortSpec.to_dict`. */
export function cohortSpecToDict(spec: CohortSpec): Record<string, unknown> {
  return { file: COHORT_FILE, count: spec.count, sha256: spec.sha256 };
}

/**
 * `ScoreNorm.from_dict`: the manifest's `score_norm`, validated against its `cohort`: with a
 * cohort `as-norm` or `s-norm`, without one only `cosine` with a `centre`.
 */
export function parseScoreNorm(data: JsonValue | undefined, cohort: CohortSpec | null): ScoreNorm {
  if (!isObject(data)) throw new BundleError("manifest: score_norm must be an object");
  const unknown = Object.keys(data)
    .filter((key) => !["method", "top_k", "centre"].includes(key))
    .sort();
  if (unknown.length > 0) throw new BundleError(`manifest: score_norm has an unknown key ${quote(unknown[0])}`);
  const centre = "centre" in data ? parseCentreSpec(data["centre"]) : null;
  const method = data["method"];
  if (cohort === null) {
    if (centre === null) throw new BundleError("manifest: score_norm needs a cohort to normalise against");
    if (method !== RAW_COSINE.name) {
      throw new BundleError(`manifest: score_norm.method must be ${quote(RAW_COSINE.name)} without a cohort`);
    }
    if ("top_k" in data) throw new BundleError("manifest: score_norm.top_k is for as-norm (cosine has none)");
    return { method: "cosine", topK: null, centre };
  }
  if (!(typeof method === "string" && (SCORE_NORMS as readonly string[]).includes(method))) {
    throw new BundleError(`manifest: score_norm.method must be one of ${SCORE_NORMS.join(", ")}`);
  }
  const name = method as ScoreNormMethod;
  return { method: name, topK: SCORE_RULES[name].topK(data, cohort.count), centre };
}

/** `CentreSpec.from_dict`: `score_norm.centre`; a problem is a BundleError naming the key. */
export function parseCentreSpec(data: JsonValue | undefined): CentreSpec {
  if (!isObject(data)) throw new BundleError("manifest: score_norm.centre must be an object");
  const unknown = Object.keys(data)
    .filter((key) => !["file", "people", "sha256"].includes(key))
    .sort();
  if (unknown.length > 0) throw new BundleError(`manifest: score_norm.centre has an unknown key ${quote(unknown[0])}`);
  if (data["file"] !== CENTRE_FILE) throw new BundleError(`manifest: score_norm.centre.file must be ${quote(CENTRE_FILE)}`);
  const people = integer(data["people"], "score_norm.centre.people", 1, MAX_CENTRE_PEOPLE);
  const sha = data["sha256"];
  if (typeof sha !== "string" || !SHA256_HEX.test(sha)) {
    throw new BundleError("manifest: score_norm.centre.sha256 is not 64 lowercase hex digits");
  }
  return { people, sha256: sha };
}

/** `ScoreNorm.to_dict`. */
export function scoreNormToDict(norm: ScoreNorm): Record<string, unknown> {
  const data: Record<string, unknown> = { method: norm.method };
  if (norm.topK !== null) data["top_k"] = norm.topK;
  if (norm.centre) data["centre"] = { file: CENTRE_FILE, people: norm.centre.people, sha256: norm.centre.sha256 };
  return data;
}

/** `ScoreNorm.k`: how many cohort vectors each statistic uses, of a cohort of `count`. */
export function scoreNormK(norm: ScoreNorm, count: number): number {
  return norm.topK === null ? count : norm.topK;
}

/**
 * A recording chain's mean unit embedding, taken out of prototype-mode vectors (cohort.Centre,
 * spec §6.8): `c(z) = rescale(rescale(z, 1) − m, 1)`.
 */
export class Centre {
  readonly mean: Float64Array;

  constructor(mean: Float64Array) {
    this.mean = mean;
  }

  /**
   * `Centre.from_member`: check `centre.f32` against the manifest (digest first, then size and
   * values): `dim` finite float32 values whose norm, in double, is below 1.
   */
  static fromMember(data: Uint8Array, spec: CentreSpec, dim: number, bundle: string): Centre {
    if (hex(sha256(data)) !== spec.sha256) {
      throw new BundleError(
        `${bundle}: centre.f32 does not match the manifest's score_norm.centre.sha256 (the bundle was modified or damaged)`,
        "bundle.digest-mismatch",
      );
    }
    if (data.length !== 4 * dim) {
      throw new BundleError(`${bundle}: centre.f32 is ${data.length} bytes, not dim x 4 = ${4 * dim}`, "bundle.member-invalid");
    }
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const mean = new Float64Array(dim);
    let squares = 0;
    for (let j = 0; j < dim; j++) {
      const x = view.getFloat32(4 * j, true);
      if (!Number.isFinite(x)) throw new BundleError(`${bundle}: centre.f32 holds a non-finite value`, "bundle.member-invalid");
      squares += x * x;
      mean[j] = x;
    }
    if (!(Math.sqrt(squares) < 1)) {
      throw new BundleError(
        `${bundle}: centre.f32 is not a mean of unit vectors (its norm is not below 1)`,
        "bundle.member-invalid",
      );
    }
    return new Centre(mean);
  }

  /** The vector unit-normalised, the mean taken out, normalised again. */
  apply(vector: Vector): Float64Array {
    if (vector.length !== this.mean.length) throw new RangeError(`vectors of length ${vector.length} and ${this.mean.length}`);
    const unit = rescale(vector, 1);
    const centred = new Float64Array(unit.length);
    for (let j = 0; j < unit.length; j++) centred[j] = unit[j]! - this.mean[j]!;
    return rescale(centred, 1);
  }
}

/** `ScoreNorm.describe`: one plain phrase for `info`. */
export function describeScoreNorm(norm: ScoreNorm, count: number): string {
  return SCORE_RULES[norm.method].describe(norm.topK, count);
}

/** The cohort's unit vectors and its rule: each statistic over the `topK` nearest, or all (cohort.Cohort). */
export class Cohort {
  /** The cohort vectors, each rescaled to unit length (float64). */
  readonly units: Float64Array[];
  readonly topK: number;
  readonly method: ScoreNormMethod;
  readonly rule: ScoreRule;

  constructor(vectors: Vector[], topK: number, method: ScoreNormMethod = "as-norm") {
    if (vectors.length < 2) throw new RangeError("a cohort needs at least two vectors");
    if (!(SCORE_NORMS as readonly string[]).includes(method)) throw new RangeError(`unknown score normalisation ${method}`);
    this.rule = SCORE_RULES[method];
    const k = this.rule.nearest(topK) ?? vectors.length;
    if (!(Number.isInteger(k) && k >= 2 && k <= vectors.length)) {
      throw new RangeError(`top_k must be an integer in [2, ${vectors.length}], not ${topK}`);
    }
    this.units = vectors.map((v) => rescale(v, 1));
    this.topK = k;
    this.method = method;
  }

  /**
   * `Cohort.from_member`: check `cohort.f32` against the manifest (digest first, then size and
   * values); every problem is a BundleError naming the bundle.
   */
  static fromMember(data: Uint8Array, spec: CohortSpec, norm: ScoreNorm, dim: number, bundle: string): Cohort {
    if (hex(sha256(data)) !== spec.sha256) {
      throw new BundleError(
        `${bundle}: cohort.f32 does not match the manifest's cohort.sha256 (the bundle was modified or damaged)`, "bundle.digest-mismatch",
      );
    }
    const expectedBytes = 4 * spec.count * dim;
    if (data.length !== expectedBytes) {
      throw new BundleError(`${bundle}: cohort.f32 is ${data.length} bytes, not count x dim x 4 = ${expectedBytes}`, "bundle.member-invalid");
    }
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const vectors: Float64Array[] = [];
    for (let r = 0; r < spec.count; r++) {
      const row = new Float64Array(dim);
      let squares = 0;
      for (let j = 0; j < dim; j++) {
        const x = view.getFloat32(4 * (r * dim + j), true);
        if (!Number.isFinite(x)) throw new BundleError(`${bundle}: cohort.f32 holds a non-finite value`, "bundle.member-invalid");
        squares += x * x;
        row[j] = x;
      }
      // In double, as scoring rescales it (spec §6.1): a vector shorter than the rescale epsilon
      // (zero, or subnormal float32 values) cannot be made unit length.
      if (Math.sqrt(squares) < RESCALE_EPSILON) {
        throw new BundleError(
          `${bundle}: cohort.f32 holds a vector too short to normalise (zero or subnormal: norm below 1e-12)`,
          "bundle.member-invalid",
        );
      }
      vectors.push(row);
    }
    return new Cohort(vectors, scoreNormK(norm, spec.count), norm.method as ScoreNormMethod);
  }

  /**
   * `Cohort.statistics` of one vector: mean and population standard deviation of its `topK`
   * largest cosines with the cohort (s-norm: all of them, `topK` = the count), the deviation
   * floored at {@link MIN_STD}.
   */
  statistics(vector: Vector): CohortStatistics {
    const unit = rescale(vector, 1);
    const scores = new Float64Array(this.units.length);
    for (let c = 0; c < this.units.length; c++) {
      const u = this.units[c]!;
      if (u.length !== unit.length) throw new RangeError(`vectors of length ${unit.length} and ${u.length}`);
      let s = 0;
      for (let j = 0; j < unit.length; j++) s += unit[j]! * u[j]!;
      scores[c] = s;
    }
    scores.sort(); // ascending: the topK largest are the last
    const k = Math.min(this.topK, scores.length);
    const top = scores.subarray(scores.length - k);
    let sum = 0;
    for (const s of top) sum += s;
    const mean = sum / k;
    let squares = 0;
    for (const s of top) squares += (s - mean) * (s - mean);
    return { mean, std: Math.max(Math.sqrt(squares / k), MIN_STD) };
  }

  /** The score of `test` against `reference` by the cohort's rule, from their cosine. */
  normalised(score: number, reference: Vector, test: Vector): number {
    return this.rule.normalise(score, this.statistics(reference), this.statistics(test));
  }
}

/** `as_norm`: `½ ((s − μe)/σe + (s − μt)/σt)`. */
export function asNorm(score: number, enrolled: CohortStatistics, tested: CohortStatistics): number {
  return 0.5 * ((score - enrolled.mean) / enrolled.std + (score - tested.mean) / tested.std);
}

/**
 * `normalised_leave_one_out`: the leave-one-out scores ({@link leaveOneOutScores}), each
 * normalised by the cohort's rule with the statistics of its left-out prototype and of its sample (spec §6.7).
 */
export function normalisedLeaveOneOut(rows: Vector[], cohort: Cohort): Float64Array {
  const { units, others } = leaveOneOutPairs(rows);
  const raw = leaveOneOutScores(rows);
  return Float64Array.from(raw, (score, i) => cohort.normalised(score, others[i]!, units[i]!));
}
