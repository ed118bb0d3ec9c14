// Unit tests of the helpers whose Python semantics are easy to get wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BackoffPolicy,
  MediaError,
  MemoryStore,
  Templates,
  UvsdkError,
  b64decodeStrict,
  checkAudio,
  decodeWav,
  rankGF2,
  repeatPad,
  warmupThreshold,
  windowStarts,
  newTemplate,
} from "../src/index.js";
import { pairwiseSum, roundHalfEven } from "../src/scoring.js";
import { num, quote, shown } from "../src/text.js";
import { canonicalJson, parseJson } from "../src/json.js";
import { printable } from "../src/errors.js";

test("sample counts round half to even (spec §5.4)", () => {
  assert.deepEqual([0.5, 1.5, 2.5, -0.5, -1.5, 27562.5, 2.4999999999999996].map(roundHalfEven), [0, 2, 2, 0, -2, 27562, 2]);
  assert.equal(roundHalfEven(0.025 * 44100), 1102); // 1102.5 -> 1102
});

test("messages write values in JavaScript's own spelling, on one line", () => {
  assert.equal(num(0.00005), "0.00005");
  assert.equal(num(22.3716, 3), "22.4");
  assert.equal(num(1e-5, 3), "0.00001");
  assert.equal(quote("a\nb"), '"a\\nb"');
  assert.equal(shown(16000n), "16000");
  assert.equal(shown(undefined), "absent");
  assert.equal(shown({ a: [1n, 1.5, "x\n"] }), '{"a": [1, 1.5, "x\\n"]}');
  assert.equal(shown("x".repeat(100), 10), '"xxxxxxxx…');
});

test("JSON keeps the int/float distinction; writing is RFC 8785", () => {
  const v = parseJson('{"a": 1, "b": 1.0, "c": -0, "d": 1e3, "e": NaN}') as Record<string, unknown>;
  assert.equal(v["a"], 1n);
  assert.equal(v["b"], 1);
  assert.equal(v["c"], 0n);
  assert.equal(v["d"], 1000);
  assert.ok(Number.isNaN(v["e"]));
  assert.throws(() => parseJson("{'a': 1}"));
  assert.throws(() => parseJson('{"a": 1} x'));
  assert.equal(canonicalJson({ b: 1, a: [1.5, "x"], "é": 1e21 }), '{"a":[1.5,"x"],"b":1,"é":1e+21}');
});

test("strict base64 as b64decode(validate=True)", () => {
  assert.deepEqual(Array.from(b64decodeStrict("AAE=")), [0, 1]);
  assert.throws(() => b64decodeStrict("AAE"));
  assert.throws(() => b64decodeStrict("AA E="));
  assert.throws(() => b64decodeStrict("****"));
});

test("GF(2) rank: full over the reals is not enough", () => {
  // [[1,1,0],[0,1,1],[1,0,1]]: determinant 2 over the reals, rank 2 over GF(2)
  assert.equal(rankGF2({ k: 3, n: 3, bits: Uint8Array.from([1, 1, 0, 0, 1, 1, 1, 0, 1]) }), 2);
  assert.equal(rankGF2({ k: 2, n: 3, bits: Uint8Array.from([1, 0, 0, 0, 1, 0]) }), 2);
});

test("pairwise summation as numpy", () => {
  // 1e16 + 1 + ... loses the ones in a sequential sum; numpy's pairwise blocks keep some
  const values = Float64Array.from({ length: 300 }, (_, i) => (i === 0 ? 1e16 : 1));
  const sequential = values.reduce((a, b) => a + b, 0);
  assert.equal(sequential, 1e16);
  assert.notEqual(pairwiseSum(values), sequential);
});

test("windows and repeat padding", () => {
  assert.deepEqual(windowStarts(32001, 16000, 2, 1), { width: 32000, starts: [0, 1] });
  assert.deepEqual(windowStarts(80000, 16000, 2, 1).starts, [0, 16000, 32000, 48000]);
  assert.deepEqual(Array.from(repeatPad(Float32Array.from([1, 2, 3]), 7)), [1, 2, 3, 1, 2, 3, 1]);
});

test("audio checks in order", () => {
  const loud = Float32Array.from({ length: 8000 }, (_, i) => Math.sin(i / 5) * 0.5);
  assert.doesNotThrow(() => checkAudio(loud, 8000, { minSeconds: 0.5 }));
  const short = loud.slice(0, 100);
  short[0] = 3; // out of range comes before too short
  assert.throws(() => checkAudio(short, 8000, { minSeconds: 0.5 }), (e: unknown) => e instanceof MediaError && e.reason === "out_of_range");
  assert.throws(() => checkAudio(new Float32Array(8000), 8000, { minSeconds: 0.5 }), { reason: "silent", message: "audio: silent: level digital silence, below -60 dBFS" });
});

function wav(format: number, bits: number, channels: number, frames: number[][]): Uint8Array {
  const width = bits / 8;
  const data = new Uint8Array(frames.length * channels * width);
  const view = new DataView(data.buffer);
  frames.forEach((frame, f) =>
    frame.forEach((v, c) => {
      const at = (f * channels + c) * width;
      if (format === 3) (bits === 32 ? view.setFloat32(at, v, true) : view.setFloat64(at, v, true));
      else if (bits === 8) view.setUint8(at, v);
      else if (bits === 16) view.setInt16(at, v, true);
      else if (bits === 24) {
        view.setUint8(at, v & 0xff);
        view.setUint8(at + 1, (v >> 8) & 0xff);
        view.setUint8(at + 2, (v >> 16) & 0xff);
      } else view.setInt32(at, v, true);
    }),
  );
  const out = new Uint8Array(44 + data.length);
  const h = new DataView(out.buffer);
  out.set(new TextEncoder().encode("RIFF"), 0);
  h.setUint32(4, 36 + data.length, true);
  out.set(new TextEncoder().encode("WAVEfmt "), 8);
  h.setUint32(16, 16, true);
  h.setUint16(20, format, true);
  h.setUint16(22, channels, true);
  h.setUint32(24, 8000, true);
  h.setUint32(28, 8000 * channels * width, true);
  h.setUint16(32, channels * width, true);
  h.setUint16(34, bits, true);
  out.set(new TextEncoder().encode("data"), 36);
  h.setUint32(40, data.length, true);
  out.set(data, 44);
  return out;
}

test("WAV decoding: PCM 8/16/24/32, float 32/64, channels averaged", () => {
  assert.deepEqual(Array.from(decodeWav(wav(1, 16, 1, [[-32768], [16384]])).samples), [-1, 0.5]);
  assert.deepEqual(Array.from(decodeWav(wav(1, 8, 1, [[0], [192]])).samples), [-1, 0.5]);
  assert.deepEqual(Array.from(decodeWav(wav(1, 24, 1, [[0x800000], [0x400000]])).samples), [-1, 0.5]);
  assert.deepEqual(Array.from(decodeWav(wav(1, 32, 1, [[-(2 ** 31)], [2 ** 30]])).samples), [-1, 0.5]);
  assert.deepEqual(Array.from(decodeWav(wav(3, 32, 2, [[0.5, -0.25]])).samples), [0.125]);
  assert.deepEqual(Array.from(decodeWav(wav(3, 64, 1, [[0.1]])).samples), [Math.fround(0.1)]);
  assert.throws(() => decodeWav(wav(3, 32, 1, [[NaN]])), { reason: "non_finite" });
  const truncated = wav(1, 16, 1, [[1], [2], [3]]).slice(0, 46);
  assert.throws(() => decodeWav(truncated), { reason: "truncated" });
  assert.throws(() => decodeWav(new Uint8Array(10)), { reason: "undecodable" });
});

test("back-off policy validation and overflow-safe lock-out", () => {
  const p = new BackoffPolicy();
  assert.equal(p.lockoutSeconds(4), 0);
  assert.equal(p.lockoutSeconds(5), 30);
  assert.equal(p.lockoutSeconds(6), 60);
  assert.equal(p.lockoutSeconds(1e30), 86400);
  assert.throws(() => new BackoffPolicy(0), RangeError);
  assert.throws(() => new BackoffPolicy(5, 30, 0.5), RangeError);
});

test("warm-up threshold: the floor(n(1-q))-th smallest, at least the first", () => {
  assert.equal(warmupThreshold([0.9, 0.1, 0.5], 0.95), 0.1);
  const hundred = Array.from({ length: 100 }, (_, i) => i);
  assert.equal(warmupThreshold(hundred, 0.9), 9); // 100 * (1 - 0.9) = 9.999... -> 10th smallest
});

test("templates: invalid user names, platform key (kdf 2), errors carry no secret", async () => {
  const store = new MemoryStore();
  const templates = new Templates(store, { platformKey: { id: new Uint8Array(16).fill(7), key: new Uint8Array(32).fill(9) } });
  await assert.rejects(templates.load("../etc"), UvsdkError);
  const t = { ...newTemplate("carol", 1), threshold: 0.123456789 };
  await templates.save(t);
  const blob = store.read("carol")!;
  assert.equal(blob[4], 2); // kdf 2
  assert.deepEqual(Array.from(blob.slice(5, 8)), [0, 0, 0]);
  const again = new Templates(store, { platformKey: { id: new Uint8Array(16).fill(7), key: new Uint8Array(32).fill(9) } });
  assert.equal((await again.load("carol")).threshold, 0.123456789);
  const wrong = new Templates(store, { platformKey: { id: new Uint8Array(16).fill(7), key: new Uint8Array(32).fill(1) } });
  await assert.rejects(wrong.load("carol"), (e: unknown) => e instanceof UvsdkError && !e.message.includes("0.123"));
  const none = new Templates(store, { passphrase: "x" });
  await assert.rejects(none.load("carol"), /its key is not in this keyring/);
});

test("messages are one line with control characters escaped", () => {
  assert.equal(new UvsdkError("a\nb   c", "store.io").message, "a b c");
  assert.equal(printable("x\x1by"), "x\\x1by");
});

test("the package does not export the JSON and message helpers", async () => {
  for (const entry of ["../src/index.js", "../src/node.js", "../src/browser.js"]) {
    const exported = Object.keys(await import(entry));
    assert.ok(exported.includes("Verifier"), `${entry} exports the SDK`);
    const internal = ["num", "quote", "shown", "parseJson", "canonicalJson"];
    assert.deepEqual(exported.filter((name) => internal.includes(name)), [], entry);
  }
});

test("score rules: one object each; the tables' scores and ranges come from them; S-norm is AS-norm over all (spec §6.7)", async () => {
  const { SCORE_RULES, SCORE_NORMS, TABLE_SCORES, SCORE_RANGES, Cohort, parseScoreNorm, describeScoreNorm } = await import("../src/index.js");
  assert.deepEqual(Object.keys(SCORE_RULES), ["cosine", "as-norm", "s-norm"]);
  assert.deepEqual([...SCORE_NORMS], ["as-norm", "s-norm"]);
  assert.deepEqual(TABLE_SCORES.prototype, Object.keys(SCORE_RULES));
  assert.deepEqual(SCORE_RANGES["as-norm"], SCORE_RULES["as-norm"].thresholdRange);
  const spec = { count: 9, sha256: "0".repeat(64) };
  const asNorm = parseScoreNorm(parseJson('{"method": "as-norm", "top_k": 4}'), spec);
  assert.deepEqual(asNorm, { method: "as-norm", topK: 4, centre: null });
  assert.equal(describeScoreNorm(asNorm, 9), "AS-norm over the 4 nearest of 9 cohort vectors");
  assert.deepEqual(parseScoreNorm(parseJson('{"method": "s-norm"}'), spec), { method: "s-norm", topK: null, centre: null });
  const vectors = Array.from({ length: 9 }, (_, i) => Float64Array.from({ length: 6 }, (_, j) => Math.sin(7 * i + j + 1)));
  const test = Float64Array.from({ length: 6 }, (_, j) => Math.cos(j));
  const all = new Cohort(vectors, 2, "s-norm");
  assert.equal(all.topK, 9);
  assert.deepEqual(all.statistics(test), new Cohort(vectors, 9, "as-norm").statistics(test));
  assert.equal(SCORE_RULES.cosine.normalise(0.25, { mean: 0.1, std: 0.2 }, { mean: 0.1, std: 0.2 }), 0.25);
  assert.equal(all.rule.normalise(0.5, { mean: 0.1, std: 0.2 }, { mean: 0.3, std: 0.1 }), 0.5 * (0.4 / 0.2 + 0.2 / 0.1));
});

test("a template payload reads in any spelling; a malformed one names the member, never its value (spec §10.5)", async () => {
  const { toPayload, fromPayload } = await import("../src/index.js");
  const template = { ...newTemplate("alice", 1700000000.5), mode: "prototype", threshold: 0.25, prototype: Float32Array.of(0.5, -0.25) };
  const canonical = new TextDecoder().decode(toPayload(template));
  const members = JSON.parse(canonical) as Record<string, unknown>;
  assert.deepEqual(Object.keys(members), [...Object.keys(members)].sort(), "keys sorted (RFC 8785)");
  const encode = (value: unknown) => new TextEncoder().encode(typeof value === "string" ? value : JSON.stringify(value, null, 2));
  assert.deepEqual(fromPayload(encode(members)), fromPayload(encode(canonical)));
  const floats = canonical.replace('"base_seconds":30', '"base_seconds":30.0').replace('"threshold":0.25', '"threshold":2.5e-1');
  assert.deepEqual(fromPayload(encode(floats)), fromPayload(encode(canonical)));
  for (const [change, reason] of [
    [{ generation: "7" }, "generation is not an integer"],
    [{ samples: 5.5 }, "samples is not an integer"],
    [{ user: 7 }, "user is not a string"],
    [{ version: 4 }, "version 4 is unknown"],
  ] as const) {
    assert.throws(() => fromPayload(encode({ ...members, ...change })), (e: unknown) => e instanceof UvsdkError && e.code === "template.malformed" && e.message.includes(reason) && !e.message.includes("7"), reason);
  }
  // an integer member written with a fraction is not an integer (spec §1), as the reference's policy check
  assert.throws(() => fromPayload(encode(canonical.replace('"attempts":5', '"attempts":5.0'))), /policy\.attempts is not an integer/);
});
