// The shared conformance vectors (conformance/README.md): every vector of every file, run against
// the TypeScript package under Node with onnxruntime-node. `npm test` builds dist/ first.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as ort from "onnxruntime-node";
import * as uv from "../dist/src/node.js";

const ROOT = new URL("../../", import.meta.url);
const CONFORMANCE = new URL("conformance/", ROOT);
const read = (rel) => new Uint8Array(readFileSync(new URL(rel, rel.startsWith("sdk/") ? ROOT : CONFORMANCE)));
const vectors = (name) => JSON.parse(readFileSync(new URL(`vectors/${name}.json`, CONFORMANCE), "utf8"));
const b64 = (text) => new Uint8Array(Buffer.from(text, "base64"));
const f32 = (text) => {
  const bytes = b64(text);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
};
const bitString = (bits) => Array.from(bits).join("");
const bitsOf = (text) => Uint8Array.from(text, (c) => Number(c));
const close = (actual, expected, tolerance, what) => {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(actual[i] - expected[i]) <= tolerance, `${what}[${i}]: ${actual[i]} vs ${expected[i]} (tolerance ${tolerance})`);
  }
};
const bundles = new Map();
const bundle = async (path) => {
  if (!bundles.has(path)) bundles.set(path, await uv.loadBundle(read(path), { name: path.split("/").pop() }));
  return bundles.get(path);
};
const wavSamples = (path) => uv.decodeWav(read(path), { name: path }).samples;

describe("conformance: media.json", () => {
  const doc = vectors("media");
  for (const c of doc.checks) {
    test(`check ${c.name}`, () => {
      const samples = f32(c.samples_f32);
      const reason = () => {
        try {
          uv.checkAudio(samples, c.sample_rate, { minSeconds: c.min_seconds });
          return null;
        } catch (error) {
          assert.ok(error instanceof uv.MediaError, String(error));
          return error.reason;
        }
      };
      const got = reason();
      assert.equal(got, c.enroll, "enroll");
      assert.equal(got === "clipped" ? null : got, c.verify, "verify");
    });
  }
  for (const c of doc.trims) {
    test(`trim ${c.name}`, () => {
      const samples = c.wav ? wavSamples(c.wav) : f32(c.samples_f32);
      for (const r of c.results) {
        assert.deepEqual(uv.trimBounds(samples, c.sample_rate, { minSeconds: r.min_seconds }), [r.start, r.stop], `min_seconds ${r.min_seconds}`);
        assert.equal(uv.trimSilence(samples, c.sample_rate, { minSeconds: r.min_seconds }).length, r.stop - r.start);
      }
    });
  }
  for (const c of doc.windows) {
    test(`windows ${c.length} samples at ${c.sample_rate} Hz, ${c.window_seconds}/${c.hop_seconds} s`, () => {
      const { width, starts } = uv.windowStarts(c.length, c.sample_rate, c.window_seconds, c.hop_seconds);
      assert.equal(width, c.width);
      assert.deepEqual(starts, c.starts);
    });
  }
});

describe("conformance: model.json (onnxruntime-node)", () => {
  const doc = vectors("model");
  for (const c of doc.cases) {
    test(`model ${c.bundle} ${c.wav ?? "pixels"}`, async () => {
      const b = await bundle(c.bundle);
      const verifier = await uv.Verifier.create({ ort, bundle: b, store: new uv.MemoryStore() });
      if (c.wav) {
        const samples = wavSamples(c.wav);
        const spec = b.manifest.input;
        const [start, stop] = uv.trimBounds(samples, spec.sampleRate, { minSeconds: spec.minSeconds });
        assert.deepEqual([start, stop], c.trim, "trim");
        const trimmed = samples.slice(start, stop);
        const { width, starts } = uv.windowStarts(trimmed.length, spec.sampleRate, spec.windowSeconds, spec.hopSeconds);
        assert.equal(width, c.width);
        assert.deepEqual(starts, c.starts);
        const first = trimmed.length < width ? uv.repeatPad(trimmed, width) : trimmed.slice(0, width);
        const session = await ort.InferenceSession.create(b.modelBytes);
        const out = await session.run({ input: new ort.Tensor("float32", first, [1, width]) });
        close(out.output.data, c.window0_output, c.tolerance, "window0_output");
        close(await verifier.embed(samples), c.vector, c.tolerance, "vector");
      } else {
        const pixels = b64(c.pixels_u8);
        assert.equal(pixels.length, c.shape[0] * c.shape[1] * c.shape[2]);
        close(await verifier.embed(pixels), c.vector, c.tolerance, "vector");
      }
    });
  }
});

describe("conformance: enroll.json", () => {
  const doc = vectors("enroll");
  test("minimum samples", () => assert.equal(uv.MIN_ENROLLMENT_SAMPLES, doc.minimum_samples));
  doc.cases.forEach((c, index) => {
    test(`enroll case ${index}: ${c.mode}, tpr ${c.target_tpr}, far ${c.far}`, async () => {
      const b = await bundle(c.bundle);
      const outputs = c.enrollment_outputs.map((o) => Float32Array.from(o));
      const codeword = c.codeword ? bitsOf(c.codeword) : null;
      const options = { codeword, targetTpr: c.target_tpr, calibration: b.manifest.calibration, far: c.far };
      if (c.prototype) close(Float32Array.from(uv.prototype(outputs)), c.prototype, 1e-6, "prototype");
      const scores = codeword
        ? outputs.map((o) => uv.codewordScore(uv.bipolar(codeword), o))
        : Array.from(uv.leaveOneOutScores(outputs));
      close(scores, c.warmup_scores, 1e-9, "warmup_scores");
      assert.ok(Math.abs(uv.warmupThreshold(scores, c.target_tpr) - c.warmup_threshold) <= 1e-9);
      if (c.error) {
        assert.throws(() => uv.computeEnrollment(outputs, options), (e) => e.constructor.name === c.error);
        return;
      }
      const result = uv.computeEnrollment(outputs, options);
      assert.equal(result.mode, c.mode);
      if (c.row === null) assert.equal(result.row, null);
      else assert.deepEqual({ far: result.row.far, threshold: result.row.threshold }, c.row);
      assert.ok(Math.abs(result.threshold - c.threshold) <= 1e-9, "threshold");
      assert.equal(result.ownRejected, c.own_rejected);
      const reference = codeword ? uv.bipolar(codeword) : result.prototype;
      for (const v of c.verify) {
        const output = Float32Array.from(v.output);
        const score = codeword ? uv.codewordScore(reference, output) : uv.cosine(reference, output);
        assert.ok(Math.abs(score - v.score) <= 1e-9, `score ${score} vs ${v.score}`);
        assert.equal(score >= result.threshold, v.accepted);
      }
    });
  });
  test("too few samples", () => {
    const outputs = doc.too_few.enrollment_outputs.map((o) => Float32Array.from(o));
    assert.throws(() => uv.computeEnrollment(outputs, {}), (e) => e.constructor.name === doc.too_few.error);
  });
  for (const [path, sha] of Object.entries(doc.calibration_sha256)) {
    test(`calibration sha256 of ${path}`, async () => {
      assert.equal((await bundle(path)).manifest.calibration.sha256, sha);
    });
  }
  for (const c of doc.far_checks) {
    test(`far ${c.far}`, () => {
      if (c.valid) assert.equal(uv.checkFar(c.far), c.far);
      else assert.throws(() => uv.checkFar(c.far), uv.CalibrationError);
    });
  }
});

describe("conformance: codeword.json", () => {
  const doc = vectors("codeword");
  const codes = {};
  for (const [name, c] of Object.entries(doc.codes)) {
    test(`code ${name}`, () => {
      const g = uv.unpackGenerator(c.generator, c.k, c.n);
      assert.equal(uv.codeFingerprint(g), c.fingerprint);
      assert.equal(uv.packGenerator(g), c.generator);
      codes[name] = g;
    });
  }
  doc.cases.forEach((c, index) => {
    test(`codeword case ${index}: ${c.code}, user ${c.user_id}`, () => {
      const code = doc.codes[c.code];
      const g = codes[c.code] ?? uv.unpackGenerator(code.generator, code.k, code.n);
      // random_bits lists the tail bits in order; newMessage takes them as a number, bit i first
      let random = 0n;
      for (let i = 0; i < c.random_bits.length; i++) if (c.random_bits[i] === "1") random |= 1n << BigInt(i);
      const message = uv.newMessage(c.user_id, code.id_bits, code.k, random);
      assert.equal(bitString(message), c.message);
      const codeword = uv.encode(message, g);
      assert.equal(bitString(codeword), c.codeword);
      assert.deepEqual(Array.from(uv.bipolar(codeword).slice(0, 8)), c.bipolar_first8);
    });
  });
  for (const c of doc.refused_generators) {
    test(`refused generator ${c.name}`, () => {
      assert.throws(() => uv.unpackGenerator(c.generator, c.k, c.n), (e) => e instanceof uv.BundleError && e.constructor.name === c.error);
    });
  }
  for (const c of doc.user_ids_out_of_range) {
    test(`user id ${c.user_id} out of ${c.id_bits} bits`, () => {
      assert.throws(() => uv.userIdBits(c.user_id, c.id_bits), uv.UvsdkError);
    });
  }
});

const templateKind = (error) => {
  if (error instanceof uv.WrongKeyError) return "wrong_key";
  if (error instanceof uv.RollbackError) return "rollback";
  if (!(error instanceof uv.TemplateError)) return `unexpected ${error}`;
  const m = error.message;
  if (m.includes("not a uvsdk template")) return "not_a_template";
  if (m.includes("header was modified")) return "header_modified";
  if (m.includes("key parameters") || m.includes("unknown key derivation")) return "key_parameters";
  if (m.includes("was modified or is damaged")) return "modified";
  if (m.includes("malformed")) return "malformed";
  if (m.includes("another user")) return "wrong_user";
  return `unknown: ${m}`;
};

describe("conformance: template.json", () => {
  const doc = vectors("template");
  test("key check example", () => {
    const { key_hex, check_hex } = doc.key_check_example;
    assert.equal(uv.hex(uv.keyCheck(uv.fromHex(key_hex))), check_hex);
  });
  for (const c of doc.seal) {
    test(`seal ${c.name}`, async () => {
      const salt = uv.fromHex(c.salt_hex);
      const nonce = uv.fromHex(c.nonce_hex);
      const key = await uv.deriveKey(uv.passphraseBytes(c.passphrase), salt, c.log2_n, 8, 1);
      assert.equal(uv.hex(key), c.key_hex);
      const header = { version: 2, kdf: 1, log2N: c.log2_n, r: 8, p: 1, salt, check: uv.keyCheck(key), nonce };
      const aad = uv.packHeader(header);
      const payload = new TextEncoder().encode(c.payload);
      const file = new Uint8Array([...aad, ...(await uv.seal(key, nonce, payload, aad))]);
      assert.equal(Buffer.from(file).toString("base64"), c.file_b64);
      // what this port writes for the parsed payload is the Python's payload, byte for byte
      assert.equal(new TextDecoder().decode(uv.toPayload(uv.fromPayload(payload))), c.payload);
    });
  }
  for (const f of doc.fields) {
    test(`fields ${f.name}`, () => {
      const sealCase = doc.seal.find((s) => s.name === f.name);
      const t = uv.fromPayload(new TextEncoder().encode(sealCase.payload));
      assert.equal(t.user, f.user);
      assert.equal(t.mode, f.mode);
      assert.equal(t.codeword === null ? null : bitString(t.codeword), f.codeword);
      assert.deepEqual(t.prototype === null ? null : Array.from(t.prototype), f.prototype);
      assert.equal(t.threshold, f.threshold);
      assert.equal(t.generation, f.generation);
      assert.deepEqual(
        { attempts: t.policy.attempts, base_seconds: t.policy.baseSeconds, factor: t.policy.factor, max_seconds: t.policy.maxSeconds },
        f.policy,
      );
      assert.deepEqual({ failures: t.backoff.failures, locked_until: t.backoff.lockedUntil }, f.backoff);
    });
  }
  for (const c of doc.open) {
    test(`open ${c.name}`, async () => {
      const store = new uv.MemoryStore();
      const blob = b64(c.file_b64);
      store.write(c.user, blob);
      if (c.generation_record !== null && blob.length >= 24) store.setGeneration(uv.hex(blob.slice(8, 24)), c.generation_record);
      const templates = new uv.Templates(store, { passphrase: c.passphrase });
      try {
        const t = await templates.load(c.user);
        assert.ok(c.ok, `opened, expected ${c.error}`);
        assert.equal(t.generation, c.generation);
      } catch (error) {
        if (error instanceof assert.AssertionError) throw error;
        assert.ok(!c.ok, `refused (${error}), expected ok`);
        assert.equal(templateKind(error), c.error);
      }
    });
  }
});

describe("conformance: backoff.json", () => {
  const doc = vectors("backoff");
  const policy = (p) => new uv.BackoffPolicy(p.attempts, p.base_seconds, p.factor, p.max_seconds);
  for (const c of doc.lockouts) {
    test(`lockout ${c.policy} after ${c.failures}`, () => {
      assert.equal(policy(doc.policies[c.policy]).lockoutSeconds(c.failures), c.seconds);
    });
  }
  doc.sequences.forEach((s, index) => {
    test(`sequence ${index} (${s.policy})`, () => {
      const p = policy(doc.policies[s.policy]);
      let state = { failures: 0, lockedUntil: 0 };
      for (const step of s.steps) {
        let locked = false;
        try {
          uv.check(state, "alice", step.t);
        } catch (error) {
          assert.ok(error instanceof uv.LockedOutError);
          assert.equal(error.until, state.lockedUntil);
          locked = true;
        }
        assert.equal(locked, step.locked, `t=${step.t}`);
        if (!locked) state = uv.record(state, p, step.result === "accept", step.t);
        assert.equal(state.failures, step.failures, `t=${step.t} failures`);
        assert.equal(state.lockedUntil, step.locked_until, `t=${step.t} locked_until`);
      }
    });
  });
  for (const fields of doc.invalid_policies) {
    test(`invalid policy ${JSON.stringify(fields)}`, () => {
      const p = { ...doc.policies.default, ...fields };
      assert.throws(() => policy(p), RangeError);
    });
  }
});

describe("conformance: bundle.json", () => {
  const text = readFileSync(new URL("vectors/bundle.json", CONFORMANCE), "utf8");
  const doc = uv.parseJson(text); // integers stay integers (16000 vs 16000.0 matters here)
  const base = doc.base_manifest;
  const clone = (v) => uv.parseJson(JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `__INT__${x}` : x)).replace(/"__INT__(-?\d+)"/g, "$1"));
  const path = (p) => p.split(".");
  for (const c of doc.manifests) {
    test(`manifest ${c.name}`, () => {
      const data = clone(base);
      const floats = new Set();
      for (const [dotted, value] of Object.entries(c.set ?? {})) {
        const keys = path(dotted);
        let at = data;
        for (const k of keys.slice(0, -1)) at = at[/^\d+$/.test(k) ? Number(k) : k];
        const last = keys[keys.length - 1];
        at[/^\d+$/.test(last) ? Number(last) : last] = value;
        void floats;
      }
      for (const dotted of c.delete ?? []) {
        const keys = path(dotted);
        let at = data;
        for (const k of keys.slice(0, -1)) at = at[k];
        delete at[keys[keys.length - 1]];
      }
      let error = null;
      try {
        const manifest = uv.parseManifest(data);
        if (manifest.modelSha256 !== base.model_sha256) error = "model.onnx does not match the manifest's model_sha256";
      } catch (e) {
        assert.ok(e instanceof uv.BundleError, String(e));
        error = e.message;
      }
      if (c.valid) assert.equal(error, null);
      else assert.equal(error, c.error);
    });
  }
  for (const c of doc.archives) {
    test(`archive ${c.name}`, async () => {
      const trustedKeys = c.trusted_keys_hex.map(uv.fromHex);
      try {
        const b = await uv.loadBundle(b64(c.file_b64), { trustedKeys, name: `${c.name}.uvb` });
        assert.ok(c.valid, `loaded, expected ${c.error}`);
        assert.equal(b.signedBy, c.signed_by);
      } catch (error) {
        if (error instanceof assert.AssertionError) throw error;
        assert.ok(!c.valid, `refused (${error}), expected valid`);
        assert.equal(error.constructor.name, c.error);
      }
    });
  }
});
