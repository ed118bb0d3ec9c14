// Specification version 2 (docs/spec.md §2): the AS-norm cohort (cohort.f32, §3.9, §6.7; its
// rule in score_norm since version 4, with S-norm beside AS-norm),
// calibration version 2 (score, conditions, §3.6), the user's threshold (§4.3), template payload
// version 3 (cohort, §10.5) and the cohort mismatch refused at verification (§9.2).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { sha256 } from "@noble/hashes/sha2.js";
import { unzipSync, zipSync } from "fflate";
import * as ort from "onnxruntime-node";
import {
  BundleError,
  Cohort,
  FileStore,
  MIN_STD,
  ModelMismatchError,
  TemplateError,
  Verifier,
  asNorm,
  calibrationSha256,
  computeEnrollment,
  decodeWavFile,
  fromPayload,
  hex,
  leaveOneOutPairs,
  leaveOneOutScores,
  loadBundle,
  newTemplate,
  normalisedLeaveOneOut,
  parseCalibration,
  parseCohortSpec,
  parseScoreNorm,
  scoreScale,
  heldOutSentence,
  rerecordAdvised,
  binomialTail,
  toPayload,
  userThreshold,
  warmupThreshold,
  type Calibration,
} from "../src/node.js";
import { parseJson } from "../src/json.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/", import.meta.url));
const clip = async (name: string) => (await decodeWavFile(join(CONFORMANCE, "audio", name))).samples;
const bundleBytes = async (name: string) => new Uint8Array(await readFile(join(CONFORMANCE, "bundles", name)));

/** `count` × `dim` float32 little-endian bytes of `rows`. */
function f32Bytes(rows: number[][]): Uint8Array {
  const out = new Uint8Array(rows.length * rows[0]!.length * 4);
  const view = new DataView(out.buffer);
  rows.flat().forEach((x, i) => view.setFloat32(4 * i, x, true));
  return out;
}

const close = (actual: number, expected: number, what = "value", tolerance = 1e-12) =>
  assert.ok(Math.abs(actual - expected) <= tolerance, `${what}: ${actual} vs ${expected}`);

test("cohort statistics: the top_k largest cosines' mean and population deviation, floored", () => {
  // four directions in the plane; lengths do not matter (the cohort is rescaled to unit length)
  const cohort = new Cohort([[2, 0], [0, 1], [-3, 0], [0, -0.5]], 2);
  // x = (1, 0): cosines 1, 0, -1, 0 -> top 2: 1 and 0 -> mean 0.5, deviation 0.5
  let stats = cohort.statistics([1, 0]);
  close(stats.mean, 0.5, "mean");
  close(stats.std, 0.5, "std");
  // x = (3, 1): cosines 3/√10, 1/√10, -3/√10, -1/√10 -> top 2: mean 2/√10, deviation 1/√10
  stats = cohort.statistics([3, 1]);
  close(stats.mean, 2 / Math.sqrt(10), "mean");
  close(stats.std, 1 / Math.sqrt(10), "std");
  // x = (1, 1): the two largest are equal (1/√2): the deviation is floored, no division by zero
  stats = cohort.statistics([1, 1]);
  close(stats.mean, Math.SQRT1_2, "mean");
  assert.equal(stats.std, MIN_STD);
  // top_k = 3 of x = (1, 0): 1, 0, 0 -> mean 1/3, deviation √2/3
  stats = new Cohort([[1, 0], [0, 1], [-1, 0], [0, -1]], 3).statistics([1, 0]);
  close(stats.mean, 1 / 3, "mean");
  close(stats.std, Math.sqrt(2) / 3, "std");
});

test("AS-norm: ½((s − μp)/σp + (s − μt)/σt), and the normalised leave-one-out scores", () => {
  close(asNorm(0.6, { mean: 0.5, std: 0.5 }, { mean: 0.2, std: 0.1 }), 0.5 * (0.2 + 4), "as-norm");
  const cohort = new Cohort([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1]], 2);
  // cos((1,0,0), (1,1,0)) = 1/√2; statistics of (1,0,0): top 2 of 1, 0, 0, 1/√2, 0
  const p = [1, 0, 0];
  const t = [1, 1, 0];
  const sp = cohort.statistics(p);
  close(sp.mean, (1 + Math.SQRT1_2) / 2, "μp");
  const st = cohort.statistics(t);
  close(cohort.normalised(Math.SQRT1_2, p, t), 0.5 * ((Math.SQRT1_2 - sp.mean) / sp.std + (Math.SQRT1_2 - st.mean) / st.std));
  const rows = [[1, 0.1, 0], [0.9, 0.2, 0.1], [1, 0, 0.2], [0.8, 0.1, 0.1], [1.1, 0.3, 0]];
  const raw = leaveOneOutScores(rows);
  const { units, others } = leaveOneOutPairs(rows);
  const normalised = normalisedLeaveOneOut(rows, cohort);
  assert.equal(normalised.length, rows.length);
  for (let i = 0; i < rows.length; i++) {
    const expected = asNorm(raw[i]!, cohort.statistics(others[i]!), cohort.statistics(units[i]!));
    close(normalised[i]!, expected, `score ${i}`);
    assert.notEqual(normalised[i], raw[i]);
  }
  // computeEnrollment normalises prototype mode with a cohort, and only then
  assert.deepEqual(computeEnrollment(rows, { cohort }).scores, normalised);
  assert.deepEqual(computeEnrollment(rows, {}).scores, raw);
});

test("cohort.f32 against the manifest: digest, size, finite and non-zero vectors", () => {
  const rows = [[1, 0], [0, 1], [0.5, 0.5]];
  const data = f32Bytes(rows);
  const spec = { count: 3, sha256: hex(sha256(data)) };
  const norm = { method: "as-norm" as const, topK: 2, centre: null };
  assert.equal(Cohort.fromMember(data, spec, norm, 2, "b.uvb").units.length, 3);
  const refused = (bytes: Uint8Array, pattern: RegExp, s = { ...spec, sha256: hex(sha256(bytes)) }) =>
    assert.throws(() => Cohort.fromMember(bytes, s, norm, 2, "b.uvb"), (e: unknown) => e instanceof BundleError && pattern.test(e.message));
  refused(data, /^b\.uvb: cohort\.f32 does not match the manifest's cohort\.sha256/, { ...spec, sha256: "0".repeat(64) });
  refused(data.slice(0, 20), /is 20 bytes, not count x dim x 4 = 24/);
  refused(f32Bytes([[1, 0], [0, 1], [0.5, 0.5], [1, 1]]), /is 32 bytes, not count x dim x 4 = 24/);
  refused(f32Bytes([[1, 0], [NaN, 1], [0.5, 0.5]]), /non-finite value/);
  refused(f32Bytes([[1, 0], [0, 1], [Infinity, 0.5]]), /non-finite value/);
  refused(f32Bytes([[1, 0], [0, 0], [0.5, 0.5]]), /too short to normalise/);
  refused(f32Bytes([[1, 0], [1e-40, 1e-40], [0.5, 0.5]]), /too short to normalise/); // issue 46: subnormal
  // the manifest's cohort object
  const json = (text: string) => parseCohortSpec(parseJson(text));
  assert.deepEqual(json(`{"file": "cohort.f32", "count": 3, "sha256": "${spec.sha256}"}`), spec);
  const bad: [string, RegExp][] = [
    [`[]`, /cohort must be an object/],
    [`{"file": "cohort.bin", "count": 3, "sha256": "${spec.sha256}"}`, /cohort\.file must be "cohort\.f32"/],
    [`{"file": "cohort.f32", "count": 1, "sha256": "${spec.sha256}"}`, /cohort\.count must be an integer in \[2, 16384\]/],
    [`{"file": "cohort.f32", "count": 16385, "sha256": "${spec.sha256}"}`, /cohort\.count/],
    [`{"file": "cohort.f32", "count": 3.0, "sha256": "${spec.sha256}"}`, /cohort\.count/],
    [`{"file": "cohort.f32", "count": 3, "top_k": 2, "sha256": "${spec.sha256}"}`, /cohort\.top_k is score_norm\.top_k since spec version 4/],
    [`{"file": "cohort.f32", "count": 3, "sha256": "${spec.sha256.toUpperCase()}"}`, /cohort\.sha256 is not 64 lowercase hex/],
  ];
  for (const [text, pattern] of bad) assert.throws(() => json(text), (e: unknown) => e instanceof BundleError && pattern.test(e.message), text);
  // the manifest's score_norm, against that cohort
  const rule = (text: string, cohort: typeof spec | null = spec) => parseScoreNorm(parseJson(text), cohort);
  assert.deepEqual(rule(`{"method": "as-norm", "top_k": 3}`), { method: "as-norm", topK: 3, centre: null });
  assert.deepEqual(rule(`{"method": "s-norm"}`), { method: "s-norm", topK: null, centre: null });
  const badRules: [string, RegExp, (typeof spec | null)?][] = [
    [`"as-norm"`, /score_norm must be an object/],
    [`{"method": "as-norm", "top_k": 2}`, /score_norm needs a cohort/, null],
    [`{"method": "as-norm", "top_k": 4}`, /score_norm\.top_k must be an integer in \[2, 3\]/],
    [`{"method": "as-norm", "top_k": 1}`, /score_norm\.top_k/],
    [`{"method": "as-norm"}`, /score_norm\.top_k/],
    [`{"method": "as-norm", "top_k": 2.0}`, /score_norm\.top_k/],
    [`{"method": "s-norm", "top_k": 2}`, /score_norm\.top_k is for as-norm/],
    [`{"method": "z-norm"}`, /score_norm\.method must be one of as-norm, s-norm/],
    [`{"top_k": 2}`, /score_norm\.method/],
    [`{"method": "as-norm", "top_k": 2, "extra": 1}`, /score_norm has an unknown key "extra"/],
  ];
  for (const [text, pattern, cohort] of badRules) {
    assert.throws(() => rule(text, cohort === undefined ? spec : cohort), (e: unknown) => e instanceof BundleError && pattern.test(e.message), text);
  }
});

test("held_out: parsed and validated as the reference does, in the digest, and said in words", () => {
  const base = {
    version: 2,
    data: "t",
    prototype: {
      people: 10, enroll_samples: 5, genuine_trials: 100, impostor_trials: 1000, score: "cosine", conditions: ["clean"],
      rows: [
        { far: 0.1, threshold: 0.3, false_accepts: 100, frr: 0.01, false_rejects: 1 },
        { far: 0.01, threshold: 0.6, false_accepts: 10, frr: 0.05, false_rejects: 5 },
      ],
    },
  };
  const row = { far: 0.01, false_accepts: 61, impostor_trials: 1000, far_low: 0, far_high: 0.25, false_rejects: 25, genuine_trials: 200, frr_low: 0.05, frr_high: 0.2 };
  const withHeld = (heldOut: unknown) => JSON.stringify({ ...base, prototype: { ...base.prototype, held_out: heldOut } });
  const parsed = parseCalibration(parseJson(withHeld({ chains: 8, min_seconds: 2.0, rows: [row] })), "embedding", "cosine");
  const held = parsed.tables.prototype!.heldOut!;
  assert.deepEqual(held.rows[0], { far: 0.01, falseAccepts: 61, impostorTrials: 1000, farLow: 0, farHigh: 0.25, falseRejects: 25, genuineTrials: 200, frrLow: 0.05, frrHigh: 0.2 });
  assert.notEqual(parsed.sha256, parseCalibration(parseJson(JSON.stringify(base)), "embedding", "cosine").sha256, "the digest covers it");
  // uvsdk's sentence (tests/sdk/test_calibration.py, test_enroll_says_the_held_out_figures), less its --far clause
  assert.equal(
    heldOutSentence(held.rows[0]!, held.chains, held.minSeconds),
    "About 1 in 16 attempts by a stranger recorded like you would be accepted, and about 1 in 8 of your own attempts " +
      "of 2 s or more rejected (measured on people of 8 recording chains this threshold was not fitted on: 0.0 %-25 % and 5.0 %-20 % by chain",
  );
  const refused: [unknown, RegExp][] = [
    [{ chains: 1, min_seconds: 2, rows: [row] }, /held_out\.chains must be an integer >= 2/],
    [{ chains: 8, min_seconds: 2, rows: [{ ...row, far: 0.05 }] }, /is not a FAR of the table's rows/],
    [{ chains: 8, min_seconds: 2, rows: [{ ...row, far_high: 0.05 }] }, /pooled far is not within far_low\.\.far_high/],
    [{ chains: 8, min_seconds: 2, rows: [row, row] }, /must follow the table's rows, each once/],
    [{ chains: 8, min_seconds: 2, rows: [{ ...row, chain: "x" }] }, /has an unknown key "chain"/],
  ];
  for (const [heldOut, pattern] of refused) {
    assert.throws(() => parseCalibration(parseJson(withHeld(heldOut)), "embedding", "cosine"), (e: unknown) => e instanceof BundleError && pattern.test(e.message), String(pattern));
  }
});

test("s-norm statistics take every cohort vector; the score scale names cohort and rule", () => {
  const vectors = [[2, 0], [0, 1], [-3, 0], [0, -0.5]];
  const snorm = new Cohort(vectors, 2, "s-norm");
  assert.equal(snorm.topK, 4);
  // x = (1, 0): cosines 1, 0, -1, 0 -> mean 0, deviation √(1/2)
  const stats = snorm.statistics([1, 0]);
  close(stats.mean, 0, "μ");
  close(stats.std, Math.SQRT1_2, "σ");
  assert.deepEqual(snorm.statistics([1, 0]), new Cohort(vectors, 4).statistics([1, 0]));
  // the scale: SHA-256 of {"cohort":…,"score_norm":…} in canonical form, computed by hand
  const sha = "ab".repeat(32);
  const manifest = (scoreNorm: object) =>
    ({ cohort: { count: 8, sha256: sha }, scoreNorm }) as unknown as Parameters<typeof scoreScale>[0];
  const expected = (text: string) => hex(sha256(new TextEncoder().encode(`{"cohort":"${sha}","score_norm":${text}}`)));
  assert.equal(scoreScale(manifest({ method: "as-norm", topK: 3, centre: null })), expected(`{"method":"as-norm","top_k":3}`));
  assert.equal(scoreScale(manifest({ method: "s-norm", topK: null, centre: null })), expected(`{"method":"s-norm"}`));
  assert.equal(scoreScale({ cohort: null, scoreNorm: null } as unknown as Parameters<typeof scoreScale>[0]), null);
});

test("bundles: the cohort bundle loads with its cohort; both or neither of the member and the key", async () => {
  const cohortBundle = await loadBundle(await bundleBytes("voice-embedding-cohort.uvb"), { name: "c.uvb" });
  assert.equal(cohortBundle.cohort?.units.length, cohortBundle.manifest.cohort?.count);
  assert.equal(cohortBundle.cohort?.topK, 10);
  assert.equal(cohortBundle.manifest.calibration?.tables.prototype?.score, "as-norm");
  const plain = await loadBundle(await bundleBytes("voice-embedding.uvb"), { name: "p.uvb" });
  assert.equal(plain.cohort, null);
  assert.equal(plain.manifest.cohort, null);
  // voice-embedding.uvb with the cohort bundle's cohort.f32 but no manifest key
  const members = unzipSync(await bundleBytes("voice-embedding.uvb"));
  const cohortMembers = unzipSync(await bundleBytes("voice-embedding-cohort.uvb"));
  await assert.rejects(loadBundle(zipSync({ ...members, "cohort.f32": cohortMembers["cohort.f32"]! }), { name: "x.uvb" }), {
    name: "BundleError",
    message: "x.uvb: cohort.f32 is not named in the manifest (no cohort key)",
  });
  const { "cohort.f32": _, ...withoutMember } = cohortMembers;
  await assert.rejects(loadBundle(zipSync(withoutMember), { name: "y.uvb" }), {
    name: "BundleError",
    message: "y.uvb: the manifest names a cohort and there is no cohort.f32",
  });
  const edited = cohortMembers["cohort.f32"]!.slice();
  edited[7]! ^= 1;
  await assert.rejects(loadBundle(zipSync({ ...cohortMembers, "cohort.f32": edited }), { name: "z.uvb" }), /does not match the manifest's cohort\.sha256/);
});

/** A calibration object (version 2) with a prototype table, as JSON text, edited by `change`. */
function calibrationJson(change: (table: Record<string, unknown>, data: Record<string, unknown>) => void = () => {}): string {
  const table: Record<string, unknown> = {
    people: 10,
    enroll_samples: 5,
    genuine_trials: 100,
    impostor_trials: 1000,
    score: "cosine",
    conditions: ["clean", "telephone-gsm"],
    rows: [
      { far: 0.1, threshold: 0.3, false_accepts: 100, frr: 0.01, false_rejects: 1 },
      { far: 0.01, threshold: 0.6, false_accepts: 10, frr: 0.05, false_rejects: 5 },
    ],
  };
  const data: Record<string, unknown> = { version: 2, data: "test people", prototype: table };
  change(table, data);
  return JSON.stringify(data);
}

test("calibration version 2: score and conditions per table, the as-norm range, version 1 refused", () => {
  const parse = (text: string, kind = "embedding", score: "cosine" | "as-norm" = "cosine") => parseCalibration(parseJson(text), kind, score);
  const calibration = parse(calibrationJson());
  assert.equal(calibration.version, 2);
  assert.equal(calibration.tables.prototype?.score, "cosine");
  assert.deepEqual(calibration.tables.prototype?.conditions, ["clean", "telephone-gsm"]);
  // the digest covers score and conditions
  const other = parse(calibrationJson((t) => (t["conditions"] = ["clean"])));
  assert.notEqual(other.sha256, calibration.sha256);
  assert.equal(calibrationSha256(calibration), calibration.sha256);
  const refusals: [string, RegExp, ("cosine" | "as-norm")?][] = [
    [calibrationJson((_, d) => (d["version"] = 1)), /^manifest: calibration version 1 is not 2$/],
    [calibrationJson((t) => delete t["score"]), /calibration\.prototype\.score must be one of cosine, as-norm, s-norm, not absent/],
    [calibrationJson((t) => (t["score"] = "codeword")), /score must be one of cosine, as-norm, s-norm, not "codeword"/],
    [calibrationJson((t) => (t["score"] = "as-norm")), /calibrated on as-norm scores, and this bundle's prototype scores are cosine/],
    [calibrationJson(), /calibrated on cosine scores, and this bundle's prototype scores are as-norm/, "as-norm"],
    [calibrationJson((t) => delete t["conditions"]), /conditions must be a list of 1 to 32/],
    [calibrationJson((t) => (t["conditions"] = [])), /conditions must be a list of 1 to 32/],
    [calibrationJson((t) => (t["conditions"] = Array.from({ length: 33 }, (_, i) => `c${i}`))), /conditions must be a list of 1 to 32/],
    [calibrationJson((t) => (t["conditions"] = ["Clean"])), /conditions: "Clean" is not a condition name/],
    [calibrationJson((t) => (t["conditions"] = ["-x"])), /"-x" is not a condition name/],
    [calibrationJson((t) => (t["conditions"] = ["a".repeat(33)])), /is not a condition name/],
    [calibrationJson((t) => (t["conditions"] = [7])), /conditions: 7 is not a condition name/],
    [calibrationJson((t) => (t["conditions"] = ["clean", "clean"])), /names a condition twice/],
    [calibrationJson((t) => ((t["rows"] as { threshold: number }[])[1]!.threshold = 1.5)), /threshold must be finite and in \[-1, 1\.000001\]/],
  ];
  for (const [text, pattern, score] of refusals) {
    assert.throws(() => parse(text, "embedding", score), (e: unknown) => e instanceof BundleError && pattern.test(e.message), text);
  }
  // as-norm thresholds: [-1000, 1000]
  const asNormTable = (threshold: number) =>
    calibrationJson((t) => {
      t["score"] = "as-norm";
      (t["rows"] as { threshold: number }[])[1]!.threshold = threshold;
    });
  assert.equal(parse(asNormTable(5.5), "embedding", "as-norm").tables.prototype?.rows[1]?.threshold, 5.5);
  assert.equal(parse(asNormTable(1000), "embedding", "as-norm").tables.prototype?.rows[1]?.threshold, 1000);
  assert.throws(() => parse(asNormTable(1000.5), "embedding", "as-norm"), /threshold must be finite and in \[-1000, 1000\]/);
  assert.deepEqual(parse(calibrationJson((t) => (t["conditions"] = ["a".repeat(32)]))).tables.prototype?.conditions, ["a".repeat(32)]);
});

test("the user's threshold: the row's with genuine trials, max(warm-up, row) without (spec §4.3)", () => {
  const calibration: Calibration = parseCalibration(parseJson(calibrationJson()));
  const high = [0.9, 0.92, 0.95, 0.97, 0.99]; // warm-up 0.9 at q = 0.95: above both rows
  assert.equal(warmupThreshold(high, 0.95), 0.9);
  assert.deepEqual(userThreshold(high, 0.95, calibration, "prototype", 0.01), { threshold: 0.6, row: calibration.tables.prototype!.rows[1]! });
  assert.equal(userThreshold(high, 0.95, calibration, "prototype", 0.05).threshold, 0.6); // the stricter row's (0.01)
  assert.equal(userThreshold(high, 0.95, calibration, "prototype", 0.2).threshold, 0.3); // the 0.1 row's, below the warm-up
  const low = [0.1, 0.5, 0.7, 0.8, 0.9];
  assert.equal(userThreshold(low, 0.95, calibration, "prototype", 0.01).threshold, 0.6);
  assert.deepEqual(userThreshold(high, 0.95, calibration, "prototype", null), { threshold: 0.9, row: null });
  // a codeword table (no genuine trials) floors the warm-up rule
  const codeword = parseCalibration(
    parseJson(
      calibrationJson((_, d) => {
        d["codeword"] = {
          people: 10,
          enroll_samples: 0,
          genuine_trials: 0,
          impostor_trials: 1000,
          score: "codeword",
          conditions: ["clean"],
          rows: [{ far: 0.01, threshold: 0.4, false_accepts: 9 }],
        };
      }),
    ),
    "codeword",
  );
  assert.equal(userThreshold(high, 0.95, codeword, "codeword", 0.01).threshold, 0.9);
  assert.equal(userThreshold(low, 0.95, codeword, "codeword", 0.01).threshold, 0.4);
  // re-record advice: calibrated, and more own samples rejected than max(⌊n(1 − q)⌋, 1)
  const row = calibration.tables.prototype!.rows[1]!;
  assert.equal(rerecordAdvised(2, 5, 0.95, row), true);
  assert.equal(rerecordAdvised(1, 5, 0.95, row), false);
  assert.equal(rerecordAdvised(2, 8, 0.75, row), false);
  assert.equal(rerecordAdvised(3, 8, 0.75, row), true);
  assert.equal(rerecordAdvised(5, 5, 0.95, null), false);
});

test("template payload version 3: cohort round trip; versions 1 and 2 read as null", () => {
  const template = {
    ...newTemplate("carol", 1_700_000_000),
    mode: "prototype",
    prototype: Float32Array.from([0.5, -0.25]),
    threshold: 2.5,
    targetTpr: 0.95,
    cohort: "c0".repeat(32),
    modelSha256: "ab".repeat(32),
    enrolled: 1_700_000_001,
    samples: 5,
  };
  const payload = new TextDecoder().decode(toPayload(template));
  assert.match(payload, /^\{"backoff":.*"version":3\}$/); // RFC 8785: keys sorted
  assert.match(payload, /"cohort":"(c0){32}"/);
  assert.equal(fromPayload(toPayload(template)).cohort, "c0".repeat(32));
  assert.equal(fromPayload(toPayload({ ...template, cohort: null })).cohort, null);
  const encode = (text: string) => new TextEncoder().encode(text);
  const v2 = payload.replace('"version":3', '"version":2').replace(`"cohort":"${"c0".repeat(32)}",`, "");
  assert.equal(fromPayload(encode(v2)).cohort, null);
  assert.equal(fromPayload(encode(payload.replace('"version":3', '"version":2'))).cohort, null, "version 2 ignores a cohort");
  for (const bad of [
    payload.replace(`"cohort":"${"c0".repeat(32)}",`, ""), // absent in version 3
    payload.replace(`"cohort":"${"c0".repeat(32)}"`, `"cohort":"${"c0".repeat(31)}"`),
    payload.replace(`"cohort":"${"c0".repeat(32)}"`, '"cohort":5'),
    payload.replace('"version":3', '"version":4'),
  ]) {
    assert.throws(() => fromPayload(encode(bad)), (e: unknown) => e instanceof TemplateError && /content is malformed/.test(e.message), bad);
  }
});

test("verification refuses a prototype template enrolled against another cohort (or none)", async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-js-v2-"));
  try {
    const withCohort = await loadBundle(await bundleBytes("voice-embedding-cohort.uvb"), { name: "cohort.uvb" });
    const without = await loadBundle(await bundleBytes("voice-embedding.uvb"), { name: "plain.uvb" });
    assert.equal(withCohort.manifest.modelSha256, without.manifest.modelSha256, "one model, two score scales");
    const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
    const options = { ort, store, passphrase: "correct horse battery staple", scryptLog2N: 10, clock: () => 1_700_000_000 };
    const normalising = await Verifier.create({ ...options, bundle: withCohort });
    const raw = await Verifier.create({ ...options, bundle: without });
    const samples = await Promise.all([0, 1, 2, 3, 4, 5].map((j) => clip(`speaker0-${j}.wav`)));
    const report = await normalising.enroll(samples, { user: "alice" });
    assert.equal(report.far, 0.01);
    const saved = await normalising.templates.load("alice");
    assert.equal(saved.cohort, scoreScale(withCohort.manifest));
    assert.equal(saved.threshold, withCohort.manifest.calibration!.tables.prototype!.rows.find((r) => r.far === 0.01)!.threshold);
    const genuine = await normalising.verify(await clip("speaker0-6.wav"), { user: "alice" });
    assert.equal(genuine.accepted, true);
    assert.ok(genuine.score > 1, `an AS-norm score, not a cosine: ${genuine.score}`);
    assert.equal((await normalising.verify(await clip("speaker1-6.wav"), { user: "alice" })).accepted, false);
    const refusal = { name: "ModelMismatchError", message: `user "alice" was enrolled with another score normalisation (cohort or rule) than plain.uvb's: re-enroll with uvsdk enroll` };
    await assert.rejects(raw.verify(await clip("speaker0-6.wav"), { user: "alice" }), refusal);
    await assert.rejects(raw.score(await clip("speaker0-6.wav"), "alice"), ModelMismatchError);
    // and the other way round: enrolled on raw cosines, verified with a cohort
    await raw.enroll(samples, { user: "bob" });
    assert.equal((await raw.templates.load("bob")).cohort, null);
    await assert.rejects(normalising.verify(await clip("speaker0-6.wav"), { user: "bob" }), /another score normalisation \(cohort or rule\) than cohort\.uvb's/);
    assert.equal((await raw.verify(await clip("speaker0-6.wav"), { user: "bob" })).accepted, true);
    // the same cohort under S-norm is another scale too: alice's AS-norm threshold is refused there
    const sNormBundle = await loadBundle(await bundleBytes("voice-embedding-s-norm.uvb"), { name: "s-norm.uvb" });
    assert.equal(sNormBundle.manifest.cohort!.sha256, withCohort.manifest.cohort!.sha256);
    assert.deepEqual(sNormBundle.manifest.scoreNorm, { method: "s-norm", topK: null, centre: null });
    assert.equal(sNormBundle.cohort!.topK, sNormBundle.manifest.cohort!.count);
    assert.equal(sNormBundle.manifest.calibration?.tables.prototype?.score, "s-norm");
    const sNorm = await Verifier.create({ ...options, bundle: sNormBundle });
    await assert.rejects(sNorm.verify(await clip("speaker0-6.wav"), { user: "alice" }), /cohort or rule\) than s-norm\.uvb's/);
    await sNorm.enroll(samples, { user: "carol" });
    assert.equal((await sNorm.templates.load("carol")).cohort, scoreScale(sNormBundle.manifest));
    assert.equal((await sNorm.verify(await clip("speaker0-6.wav"), { user: "carol" })).accepted, true);
    assert.equal((await sNorm.verify(await clip("speaker1-6.wav"), { user: "carol" })).accepted, false);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});

test("re-record advice weighs the table's FRR: a binomial tail below 0.05 (spec §9.1)", () => {
  const near = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-12, `${a} vs ${b}`);
  near(binomialTail(6, 3, 0.376), 0.4060140306654826);
  near(binomialTail(6, 5, 0.376), 0.030962530020229133);
  near(binomialTail(5, 2, 0.05), 0.0225925);
  assert.equal(binomialTail(10, 0, 0.3), 1);
  assert.equal(binomialTail(5, 6, 0.5), 0);
  const stated = { far: 0.01, threshold: 3.2, false_accepts: 10, frr: 0.376, false_rejects: 100 };
  const none = { ...stated, frr: null, false_rejects: null };
  const advised = (row: typeof stated | typeof none) =>
    [0, 1, 2, 3, 4, 5, 6].map((rejected) => rerecordAdvised(rejected, 6, 0.95, row as never));
  // at FRR 0.376, 3 or 4 of 6 rejected is expected: advice only from 5 (tail 0.031)
  assert.deepEqual(advised(stated), [false, false, false, false, false, true, true]);
  // no FRR stated (a codeword table): the count alone, more than max(⌊6 · 0.05⌋, 1)
  assert.deepEqual(advised(none), [false, false, true, true, true, true, true]);
});
