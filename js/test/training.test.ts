// The manifest's `training` (docs/spec.md §3.10) and the enrollment mode it sets (§9.1 step 5):
// a DP-trained FedUV bundle enrolls by prototype unless codeword mode is asked for. The malformed
// `training` objects and the mode table are conformance vectors (bundle.json, enroll.json).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { strToU8, strFromU8, unzipSync, zipSync } from "fflate";
import * as ort from "onnxruntime-node";
import {
  EnrollmentError,
  FileStore,
  SignatureError,
  Verifier,
  decodeWavFile,
  describePrivacy,
  loadBundle,
  parseTraining,
  trainingToDict,
  type Bundle,
} from "../src/node.js";
import { parseJson } from "../src/json.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/", import.meta.url));
const clip = async (name: string) => (await decodeWavFile(join(CONFORMANCE, "audio", name))).samples;
const bundleBytes = async (name: string) => new Uint8Array(await readFile(join(CONFORMANCE, "bundles", name)));
const conformanceKey = async () =>
  Buffer.from((await readFile(join(CONFORMANCE, "keys", "conformance.pub.hex"), "utf8")).trim(), "hex");

const DP_FEDUV = {
  method: "feduv",
  privacy: { mechanism: "central", epsilon: 8, delta: 1e-6, simulated_deployment: true, membership_eer_floor: 0.39 },
  enrollment: "prototype",
};

/** The conformance bundle `name` with `training` added to its manifest (its signature kept). */
async function withTraining(name: string, training: unknown): Promise<Uint8Array> {
  const members = unzipSync(await bundleBytes(name));
  const manifest = JSON.parse(strFromU8(members["manifest.json"]!));
  manifest.training = training;
  return zipSync({ ...members, "manifest.json": strToU8(JSON.stringify(manifest, null, 2)) });
}

test("training: parsed, described, round-tripped; absent means not stated", async () => {
  const plain = await loadBundle(await bundleBytes("voice-codeword.uvb"));
  assert.equal(plain.manifest.training, null);
  const dp = await loadBundle(await withTraining("voice-codeword.uvb", DP_FEDUV));
  const training = dp.manifest.training!;
  assert.equal(training.enrollment, "prototype");
  assert.equal(
    describePrivacy(training.privacy!),
    "user-level DP: ε = 8 against anyone who sees the released model, ε against the server that ran training " +
      "not stated (δ = 0.000001, central), at a simulated deployment scale",
  );
  assert.deepEqual(trainingToDict(training), DP_FEDUV);
  assert.ok(!("training" in dp.manifest.extra));
  const again = parseTraining(parseJson(JSON.stringify(trainingToDict(training))), "codeword");
  assert.deepEqual(again, training);
});

test("training: epsilon_server, optional, is parsed, described by placement and round-tripped", async () => {
  const stated = {
    ...DP_FEDUV,
    privacy: { ...DP_FEDUV.privacy, mechanism: "distributed", simulated_deployment: false, epsilon_server: 22.424515828 },
  };
  const dp = await loadBundle(await withTraining("voice-codeword.uvb", stated));
  const privacy = dp.manifest.training!.privacy!;
  assert.equal(privacy.epsilonServer, 22.424515828);
  assert.equal(
    describePrivacy(privacy),
    "user-level DP: ε = 8 against anyone who sees the released model, ε = 22.4 against the server " +
      "that ran training (δ = 0.000001, distributed)",
  );
  assert.deepEqual(trainingToDict(dp.manifest.training!), stated);
  const central = { ...privacy, mechanism: "central" as const };
  assert.match(describePrivacy(central), /ε = 22.4 against anyone who knows who trained in each round \(not the server/);
  for (const bad of [0, -1, "22", true, null]) {
    const malformed = { ...stated, privacy: { ...stated.privacy, epsilon_server: bad } };
    assert.throws(() => parseTraining(parseJson(JSON.stringify(malformed)), "codeword"), /epsilon_server/);
  }
});

test("the signature covers training: an edited training block is refused with trusted keys", async () => {
  const key = await conformanceKey();
  const edited = await withTraining("voice-codeword.uvb", DP_FEDUV);
  await assert.rejects(loadBundle(edited, { trustedKeys: [key], name: "edited.uvb" }), SignatureError);
  assert.ok((await loadBundle(await bundleBytes("voice-codeword.uvb"), { trustedKeys: [key] })).signedBy);
});

async function verifierFor(bundle: Bundle, folder: string): Promise<Verifier> {
  const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
  return Verifier.create({ ort, bundle, store, passphrase: "correct horse battery staple", scryptLog2N: 10, clock: () => 1_700_000_000 });
}

test("enroll: auto follows training.enrollment; codeword mode when asked; refusals write nothing", async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-js-training-"));
  try {
    const samples = await Promise.all([0, 1, 2, 3, 4, 5].map((j) => clip(`speaker0-${j}.wav`)));
    const dp = await verifierFor(await loadBundle(await withTraining("voice-codeword.uvb", DP_FEDUV), { name: "dp.uvb" }), folder);
    await dp.newCodeword("alice", 7);
    assert.equal((await dp.enroll(samples, { user: "alice" })).mode, "prototype");
    const template = await dp.templates.load("alice");
    assert.equal(template.mode, "prototype");
    assert.notEqual(template.codeword, null, "the codeword stays in the template, unused");
    assert.equal((await dp.enroll(samples, { user: "alice", mode: "codeword" })).mode, "codeword");
    assert.equal((await dp.enroll(samples, { user: "alice", mode: "prototype" })).mode, "prototype");
    await assert.rejects(dp.enroll(samples, { user: "bob", mode: "codeword" }), { name: "EnrollmentError", message: /holds none/ });
    assert.equal(await dp.templates.exists("bob"), false);
    // without training: a codeword user enrolls by codeword, as before
    const plain = await verifierFor(await loadBundle(await bundleBytes("voice-codeword.uvb")), folder);
    assert.equal((await plain.enroll(samples, { user: "alice" })).mode, "codeword");
    const embedding = await verifierFor(await loadBundle(await bundleBytes("voice-embedding.uvb"), { name: "e.uvb" }), folder);
    await assert.rejects(embedding.enroll([], { user: "carol", mode: "codeword" }), {
      name: "EnrollmentError",
      message: "codeword mode needs a codeword bundle, and this bundle outputs embeddings",
    });
    await assert.rejects(embedding.enroll(samples, { user: "carol", mode: "Codeword" as "codeword" }), EnrollmentError);
    assert.equal(await embedding.templates.exists("carol"), false);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});
