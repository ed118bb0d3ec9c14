// Every vector of conformance/vectors/*.json (conformance/README.md) against the uvsdk package,
// on any platform: the caller passes the package (`uv`: dist/src/index.js or browser.js), an
// ONNX Runtime module (`ort`: onnxruntime-web in a browser, onnxruntime-node under Node) and
// `readFile(path) -> Promise<Uint8Array>` for paths relative to conformance/ (and
// `sdk/uvsdk/data/default.uvb`, relative to the repository root). No Node API, no assert module:
// the same file runs in Chromium (js/web/conformance.html, js/test/browser/conformance.test.mjs)
// and in Node (js/test/conformance.test.mjs). It is the only code that runs the vectors.
//
// The checks are as strict as node:assert/strict's: `same` is deepStrictEqual (Object.is for
// values, so NaN, -0 and Infinity count; same prototypes, so a Float32Array is not an Array;
// no missing or extra keys), and `refused` wants a synchronous throw, as assert.throws does.
// Errors are compared by their code (docs/spec.md §14), never by their message's wording: a
// message need only be one non-empty line.
//
// runConformance({uv, ort, readFile, only?, onResult?}) -> [{file, name, ok, message, ms}]

// Python's json.loads (integers stay integers: 16000 vs 16000.0 matters to the bundle vectors):
// internal to the package, not exported by it, so imported from the build itself (the same
// relative path in a browser, /web/ -> /dist/, and under Node, js/web/ -> js/dist/).
import { parseJson } from "../dist/src/json.js";

export const FILES = ["media", "model", "enroll", "codeword", "template", "backoff", "bundle"];

class Mismatch extends Error {}

function fail(message) {
  throw new Mismatch(message);
}
/** Deep strict equality, as node:assert's deepStrictEqual (and strictEqual for primitives). */
function equal(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (ArrayBuffer.isView(a)) {
    if (a.byteLength !== b.byteLength || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(a) && a.length !== b.length) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) if (!Object.prototype.hasOwnProperty.call(b, k) || !equal(a[k], b[k])) return false;
  return true;
}
function show(value) {
  if (value === undefined) return "undefined";
  return JSON.stringify(value, (_, v) => {
    if (typeof v === "bigint") return `${v}n`;
    if (typeof v === "number" && (!Number.isFinite(v) || Object.is(v, -0))) return Object.is(v, -0) ? "-0" : String(v);
    if (v === undefined) return "undefined";
    if (ArrayBuffer.isView(v)) return `${v.constructor.name}[${Array.from(v, String).join(",")}]`;
    return v;
  });
}
function same(actual, expected, what) {
  if (equal(actual, expected)) return;
  let a = show(actual);
  let e = show(expected);
  if (a === e) {
    a += ` (${actual?.constructor?.name ?? typeof actual})`;
    e += ` (${expected?.constructor?.name ?? typeof expected})`;
  }
  fail(`${what}: got ${a}, expected ${e}`);
}
function ok(value, what) {
  if (!value) fail(what);
}
function close(actual, expected, tolerance, what) {
  same(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const d = Math.abs(actual[i] - expected[i]);
    if (!(d <= tolerance)) fail(`${what}[${i}]: ${actual[i]} vs ${expected[i]} (difference ${d}, tolerance ${tolerance})`);
  }
}
/** The error code of an SDK error whose message is one non-empty line; a mismatch otherwise. */
function codeOf(error, uv) {
  if (!(error instanceof uv.UvsdkError)) fail(`not an SDK error: ${error?.constructor?.name}: ${error?.message ?? error}`);
  if (!(typeof error.message === "string" && error.message.length > 0 && !/[\n\r]/.test(error.message))) {
    fail(`${error.code}: the message is not one non-empty line: ${JSON.stringify(error.message)}`);
  }
  return error.code;
}
/** `task` must throw synchronously (as assert.throws requires) an error that `check` accepts. */
function refused(task, check, what) {
  let error = null;
  let returned;
  try {
    returned = task();
  } catch (e) {
    error = e;
  }
  if (error === null) {
    if (typeof returned?.then === "function") returned.catch(() => {}); // no unhandled rejection
    fail(`${what}: no error${typeof returned?.then === "function" ? " thrown (it returned a promise)" : ""}`);
  }
  if (error instanceof Mismatch) throw error;
  if (check(error) !== true) fail(`${what}: unexpected ${error?.constructor?.name}: ${error?.message ?? error}`);
}

const b64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
const toB64 = (bytes) => btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
const f32 = (text) => {
  const bytes = b64(text);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
};
const bitString = (bits) => Array.from(bits).join("");
const bitsOf = (text) => Uint8Array.from(text, (c) => Number(c));

/** Run the vectors; returns one result per vector (a failure is a result, never a throw). */
export async function runConformance({ uv, ort, readFile, only = FILES, onResult = () => {}, sessionOptions }) {
  const text = async (path) => new TextDecoder().decode(await readFile(path));
  const bundles = new Map();
  const bundle = (path) => {
    if (!bundles.has(path)) bundles.set(path, readFile(path).then((bytes) => uv.loadBundle(bytes, { name: path.split("/").pop() })));
    return bundles.get(path);
  };
  const wavSamples = async (path) => uv.decodeWav(await readFile(path), { name: path }).samples;
  const cases = [];
  const add = (file, name, run) => cases.push({ file, name, run });

  const docs = {};
  for (const name of only) docs[name] = await text(`vectors/${name}.json`);
  const json = (name) => JSON.parse(docs[name]);

  if (docs.media) {
    const doc = json("media");
    for (const c of doc.checks) {
      add("media", `check ${c.name}`, () => {
        const samples = f32(c.samples_f32);
        let got = null;
        try {
          uv.checkAudio(samples, c.sample_rate, { minSeconds: c.min_seconds });
        } catch (error) {
          ok(error instanceof uv.MediaError, String(error));
          got = codeOf(error, uv);
        }
        same(got, c.enroll, "enroll");
        same(got === "media.clipped" ? null : got, c.verify, "verify");
      });
    }
    for (const c of doc.trims) {
      add("media", `trim ${c.name}`, async () => {
        const samples = c.wav ? await wavSamples(c.wav) : f32(c.samples_f32);
        for (const r of c.results) {
          same(uv.trimBounds(samples, c.sample_rate, { minSeconds: r.min_seconds }), [r.start, r.stop], `min_seconds ${r.min_seconds}`);
          same(uv.trimSilence(samples, c.sample_rate, { minSeconds: r.min_seconds }).length, r.stop - r.start, "trimmed length");
        }
      });
    }
    for (const c of doc.decoding) {
      add("media", `decode ${c.name}`, () => {
        let decoded = null;
        let got = null;
        try {
          decoded = uv.decodeWav(b64(c.wav_b64), { name: `${c.name}.wav`, maxSeconds: c.max_seconds });
        } catch (error) {
          ok(error instanceof uv.MediaError, String(error));
          got = codeOf(error, uv);
        }
        same(got, c.error ?? null, "error code");
        if (decoded !== null) same(decoded.samples.length, c.frames, "frames");
      });
    }
    for (const c of doc.windows) {
      add("media", `windows ${c.length} samples at ${c.sample_rate} Hz, ${c.window_seconds}/${c.hop_seconds} s`, () => {
        const { width, starts } = uv.windowStarts(c.length, c.sample_rate, c.window_seconds, c.hop_seconds);
        same(width, c.width, "width");
        same(starts, c.starts, "starts");
      });
    }
  }

  if (docs.model) {
    const doc = json("model");
    doc.cases.forEach((c, index) => {
      // the index names the case: the two image cases share their bundle
      add("model", `model case ${index}: ${c.bundle} ${c.wav ?? "pixels"}`, async () => {
        const b = await bundle(c.bundle);
        const verifier = await uv.Verifier.create({ ort, bundle: b, store: new uv.MemoryStore(), sessionOptions });
        if (c.wav) {
          const samples = await wavSamples(c.wav);
          const spec = b.manifest.input;
          const [start, stop] = uv.trimBounds(samples, spec.sampleRate, { minSeconds: spec.minSeconds });
          same([start, stop], c.trim, "trim");
          const trimmed = samples.slice(start, stop);
          const { width, starts } = uv.windowStarts(trimmed.length, spec.sampleRate, spec.windowSeconds, spec.hopSeconds);
          same(width, c.width, "width");
          same(starts, c.starts, "starts");
          const first = trimmed.length < width ? uv.repeatPad(trimmed, width) : trimmed.slice(0, width);
          const session = await ort.InferenceSession.create(b.modelBytes, sessionOptions);
          const out = await session.run({ input: new ort.Tensor("float32", first, [1, width]) });
          close(out.output.data, c.window0_output, c.tolerance, "window0_output");
          await session.release?.();
          close(await verifier.embed(samples), c.vector, c.tolerance, "vector");
        } else {
          const pixels = b64(c.pixels_u8);
          same(pixels.length, c.shape[0] * c.shape[1] * c.shape[2], "pixels");
          close(await verifier.embed(pixels), c.vector, c.tolerance, "vector");
        }
      });
    });
  }

  if (docs.enroll) {
    const doc = json("enroll");
    add("enroll", "minimum samples", () => same(uv.MIN_ENROLLMENT_SAMPLES, doc.minimum_samples, "minimum"));
    doc.cases.forEach((c, index) => {
      add("enroll", `enroll case ${index}: ${c.mode}, tpr ${c.target_tpr}, far ${c.far}`, async () => {
        const b = await bundle(c.bundle);
        const outputs = c.enrollment_outputs.map((o) => Float32Array.from(o));
        const codeword = c.codeword ? bitsOf(c.codeword) : null;
        // prototype mode takes the bundle's recording-chain mean out of every output when its
        // score_norm has a centre (spec §6.8), then normalises by the score_norm against its
        // cohort when it has one: `cohort` is the score scale (what the template records, spec
        // §3.9), null without a score_norm and in codeword mode
        const cohort = codeword ? null : b.cohort;
        const centre = codeword ? null : b.centre;
        const rows = centre ? outputs.map((o) => centre.apply(o)) : outputs;
        same(codeword ? null : uv.scoreScale(b.manifest), c.cohort, "cohort");
        const options = { codeword, targetTpr: c.target_tpr, calibration: b.manifest.calibration, far: c.far, cohort, centre };
        if (c.prototype) close(Float32Array.from(uv.prototype(rows)), c.prototype, 1e-6, "prototype");
        const scores = codeword
          ? outputs.map((o) => uv.codewordScore(uv.bipolar(codeword), o))
          : Array.from(cohort ? uv.normalisedLeaveOneOut(rows, cohort) : uv.leaveOneOutScores(rows));
        close(scores, c.warmup_scores, 1e-9, "warmup_scores");
        ok(Math.abs(uv.warmupThreshold(scores, c.target_tpr) - c.warmup_threshold) <= 1e-9, "warmup_threshold");
        if (c.error) {
          refused(() => uv.computeEnrollment(outputs, options), (e) => codeOf(e, uv) === c.error, c.error);
          return;
        }
        const result = uv.computeEnrollment(outputs, options);
        same(result.mode, c.mode, "mode");
        if (c.row === null) same(result.row, null, "row");
        else same({ far: result.row.far, threshold: result.row.threshold }, c.row, "row");
        ok(Math.abs(result.threshold - c.threshold) <= 1e-9, `threshold ${result.threshold} vs ${c.threshold}`);
        same(result.ownRejected, c.own_rejected, "own_rejected");
        same(uv.rerecordAdvised(result.ownRejected, outputs.length, c.target_tpr, result.row), c.rerecord_advice, "rerecord_advice");
        const reference = codeword ? uv.bipolar(codeword) : result.prototype;
        for (const v of c.verify) {
          const output = centre ? centre.apply(Float32Array.from(v.output)) : Float32Array.from(v.output);
          let score = codeword ? uv.codewordScore(reference, output) : uv.cosine(reference, output);
          if (cohort) score = cohort.normalised(score, reference, output);
          ok(Math.abs(score - v.score) <= 1e-9, `score ${score} vs ${v.score}`);
          same(score >= result.threshold, v.accepted, "accepted");
        }
      });
    });
    add("enroll", "too few samples", async () => {
      const outputs = doc.too_few.enrollment_outputs.map((o) => Float32Array.from(o));
      refused(() => uv.computeEnrollment(outputs, {}), (e) => codeOf(e, uv) === doc.too_few.error, doc.too_few.error);
    });
    for (const [path, sha] of Object.entries(doc.calibration_sha256)) {
      add("enroll", `calibration sha256 of ${path}`, async () => same((await bundle(path)).manifest.calibration.sha256, sha, "sha256"));
    }
    for (const c of doc.far_checks) {
      add("enroll", `far ${c.far}`, async () => {
        if (c.valid) same(uv.checkFar(c.far), c.far, "far");
        else refused(() => uv.checkFar(c.far), (e) => codeOf(e, uv) === c.error, c.error);
      });
    }
    for (const c of doc.modes) {
      const stated = c.training === null ? "no training" : `training.enrollment ${c.training.enrollment}`;
      const holds = c.holds_codeword ? "a codeword" : "no codeword";
      add("enroll", `mode ${c.requested}: ${c.bundle}, ${stated}, ${holds}`, async () => {
        const b = await bundle(c.bundle);
        const training = c.training === null ? null : uv.parseTraining(c.training, b.manifest.outputKind);
        const manifest = { ...b.manifest, training };
        if (c.error) refused(() => uv.enrollmentMode(c.requested, manifest, c.holds_codeword), (e) => codeOf(e, uv) === c.error, c.error);
        else same(uv.enrollmentMode(c.requested, manifest, c.holds_codeword), c.mode, "mode");
      });
    }
  }

  if (docs.codeword) {
    const doc = json("codeword");
    const codes = {};
    for (const [name, c] of Object.entries(doc.codes)) {
      add("codeword", `code ${name}`, () => {
        const g = uv.unpackGenerator(c.generator, c.k, c.n);
        same(uv.codeFingerprint(g), c.fingerprint, "fingerprint");
        same(uv.packGenerator(g), c.generator, "generator");
        codes[name] = g;
      });
    }
    doc.cases.forEach((c, index) => {
      add("codeword", `codeword case ${index}: ${c.code}, user ${c.user_id}`, () => {
        const code = doc.codes[c.code];
        const g = codes[c.code] ?? uv.unpackGenerator(code.generator, code.k, code.n);
        let random = 0n;
        for (let i = 0; i < c.random_bits.length; i++) if (c.random_bits[i] === "1") random |= 1n << BigInt(i);
        const message = uv.newMessage(c.user_id, code.id_bits, code.k, random);
        same(bitString(message), c.message, "message");
        const codeword = uv.encode(message, g);
        same(bitString(codeword), c.codeword, "codeword");
        same(Array.from(uv.bipolar(codeword).slice(0, 8)), c.bipolar_first8, "bipolar_first8");
      });
    });
    for (const c of doc.refused_generators) {
      add("codeword", `refused generator ${c.name}`, () =>
        refused(() => uv.unpackGenerator(c.generator, c.k, c.n), (e) => codeOf(e, uv) === c.error, c.error));
    }
    for (const c of doc.user_ids_out_of_range) {
      add("codeword", `user id ${c.user_id} out of ${c.id_bits} bits`, () =>
        refused(() => uv.userIdBits(c.user_id, c.id_bits), (e) => codeOf(e, uv) === c.error, c.error));
    }
  }

  if (docs.template) {
    const doc = json("template");
    add("template", "key check example", () => {
      const { key_hex, check_hex } = doc.key_check_example;
      same(uv.hex(uv.keyCheck(uv.fromHex(key_hex))), check_hex, "check");
    });
    for (const c of doc.seal) {
      add("template", `seal ${c.name}`, async () => {
        const salt = uv.fromHex(c.salt_hex);
        const nonce = uv.fromHex(c.nonce_hex);
        const key = await uv.deriveKey(uv.passphraseBytes(c.passphrase), salt, c.log2_n, 8, 1);
        same(uv.hex(key), c.key_hex, "scrypt key");
        const header = { version: 2, kdf: 1, log2N: c.log2_n, r: 8, p: 1, salt, check: uv.keyCheck(key), nonce };
        const aad = uv.packHeader(header);
        const payload = new TextEncoder().encode(c.payload);
        const file = new Uint8Array([...aad, ...(await uv.seal(key, nonce, payload, aad))]);
        same(toB64(file), c.file_b64, "file");
        same(new TextDecoder().decode(uv.toPayload(uv.fromPayload(payload))), c.payload, "payload");
      });
    }
    for (const f of doc.fields) {
      add("template", `fields ${f.name}`, () => {
        const sealCase = doc.seal.find((s) => s.name === f.name);
        const t = uv.fromPayload(new TextEncoder().encode(sealCase.payload));
        same(t.user, f.user, "user");
        same(t.mode, f.mode, "mode");
        same(t.codeword === null ? null : bitString(t.codeword), f.codeword, "codeword");
        same(t.prototype === null ? null : Array.from(t.prototype), f.prototype, "prototype");
        same(t.threshold, f.threshold, "threshold");
        same(t.cohort, f.cohort, "cohort");
        same(t.generation, f.generation, "generation");
        same(
          { attempts: t.policy.attempts, base_seconds: t.policy.baseSeconds, factor: t.policy.factor, max_seconds: t.policy.maxSeconds },
          f.policy,
          "policy",
        );
        same({ failures: t.backoff.failures, locked_until: t.backoff.lockedUntil }, f.backoff, "backoff");
      });
    }
    for (const c of doc.user_names) {
      add("template", `user name ${JSON.stringify(c.user)}`, () => {
        let got = null;
        try {
          uv.checkUser(c.user);
        } catch (error) {
          got = codeOf(error, uv);
        }
        same(got, c.error ?? null, "error code");
      });
    }
    for (const c of doc.open) {
      add("template", `open ${c.name}`, async () => {
        const store = new uv.MemoryStore();
        const blob = b64(c.file_b64);
        await store.write(c.user, blob);
        if (c.generation_record !== null && blob.length >= 24) await store.setGeneration(uv.hex(blob.slice(8, 24)), c.generation_record);
        const templates = new uv.Templates(store, { passphrase: c.passphrase });
        let t = null;
        let error = null;
        try {
          t = await templates.load(c.user);
        } catch (e) {
          error = e;
        }
        if (error === null) {
          ok(c.ok, `opened, expected ${c.error}`);
          same(t.generation, c.generation, "generation");
          same(t.cohort, c.cohort, "cohort");
        } else {
          ok(!c.ok, `refused (${error?.message ?? error}), expected ok`);
          same(codeOf(error, uv), c.error, "error code");
        }
      });
    }
  }

  if (docs.backoff) {
    const doc = json("backoff");
    const policy = (p) => new uv.BackoffPolicy(p.attempts, p.base_seconds, p.factor, p.max_seconds);
    for (const c of doc.lockouts) {
      add("backoff", `lockout ${c.policy} after ${c.failures}`, () => same(policy(doc.policies[c.policy]).lockoutSeconds(c.failures), c.seconds, "seconds"));
    }
    doc.sequences.forEach((s, index) => {
      add("backoff", `sequence ${index} (${s.policy})`, () => {
        const p = policy(doc.policies[s.policy]);
        let state = { failures: 0, lockedUntil: 0 };
        for (const step of s.steps) {
          let locked = false;
          try {
            uv.check(state, "alice", step.t);
          } catch (error) {
            ok(error instanceof uv.LockedOutError, String(error));
            same(error.until, state.lockedUntil, "until");
            locked = true;
          }
          same(locked, step.locked, `t=${step.t} locked`);
          if (!locked) state = uv.record(state, p, step.result === "accept", step.t);
          same(state.failures, step.failures, `t=${step.t} failures`);
          same(state.lockedUntil, step.locked_until, `t=${step.t} locked_until`);
        }
      });
    });
    for (const fields of doc.invalid_policies) {
      add("backoff", `invalid policy ${JSON.stringify(fields)}`, () =>
        refused(() => policy({ ...doc.policies.default, ...fields }), (e) => e instanceof RangeError, "RangeError"));
    }
  }

  if (docs.bundle) {
    const doc = parseJson(docs.bundle); // integers stay integers (16000 vs 16000.0 matters here)
    const base = doc.base_manifest;
    const clone = (v) =>
      parseJson(JSON.stringify(v, (_, x) => (typeof x === "bigint" ? `__INT__${x}` : x)).replace(/"__INT__(-?\d+)"/g, "$1"));
    for (const c of doc.manifests) {
      add("bundle", `manifest ${c.name}`, () => {
        const data = clone(base);
        for (const [dotted, value] of Object.entries(c.set ?? {})) {
          const keys = dotted.split(".");
          let at = data;
          for (const k of keys.slice(0, -1)) at = at[/^\d+$/.test(k) ? Number(k) : k];
          const last = keys[keys.length - 1];
          at[/^\d+$/.test(last) ? Number(last) : last] = value;
        }
        for (const dotted of c.delete ?? []) {
          const keys = dotted.split(".");
          let at = data;
          for (const k of keys.slice(0, -1)) at = at[k];
          delete at[keys[keys.length - 1]];
        }
        let error = null;
        try {
          const manifest = uv.parseManifest(data);
          if (manifest.modelSha256 !== base.model_sha256) error = "bundle.digest-mismatch";
          // the calibration digest (spec §4.5) covers what the case adds (held_out)
          if (c.calibration_sha256) same(uv.calibrationSha256(manifest.calibration), c.calibration_sha256, "calibration sha256");
        } catch (e) {
          ok(e instanceof uv.BundleError, String(e));
          error = codeOf(e, uv);
        }
        same(error, c.valid ? null : c.error, "error");
      });
    }
    for (const c of doc.archives) {
      add("bundle", `archive ${c.name}`, async () => {
        const trustedKeys = c.trusted_keys_hex.map(uv.fromHex);
        let b = null;
        let error = null;
        try {
          b = await uv.loadBundle(b64(c.file_b64), { trustedKeys, name: `${c.name}.uvb` });
        } catch (e) {
          error = e;
        }
        if (error === null) {
          ok(c.valid, `loaded, expected ${c.error}`);
          same(b.signedBy, c.signed_by, "signed_by");
        } else {
          ok(!c.valid, `refused (${error?.message ?? error}), expected valid`);
          same(codeOf(error, uv), c.error, "error code");
        }
      });
    }
  }

  const results = [];
  for (const c of cases) {
    const started = Date.now();
    let result;
    try {
      await c.run();
      result = { file: c.file, name: c.name, ok: true, message: "" };
    } catch (error) {
      const message = error instanceof Mismatch ? error.message : `${error?.constructor?.name ?? "Error"}: ${error?.message ?? error}`;
      result = { file: c.file, name: c.name, ok: false, message: message.slice(0, 2000) };
    }
    result.ms = Date.now() - started;
    results.push(result);
    onResult(result);
  }
  return results;
}
