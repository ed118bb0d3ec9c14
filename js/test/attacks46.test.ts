// Issue 46, the fourth attack tour: each test performs one attack that used to succeed in this
// port (docs/spec.md version 6).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { strFromU8, strToU8, unzipSync, zipSync } from "fflate";
import * as ort from "onnxruntime-node";
import { FileStore, ModelMismatchError, THRESHOLD_FLOOR, Verifier, decodeWavFile, loadBundle } from "../src/node.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/", import.meta.url));
const clip = async (name: string) => (await decodeWavFile(join(CONFORMANCE, "audio", name))).samples;
const bundleBytes = async (name: string) => new Uint8Array(await readFile(join(CONFORMANCE, "bundles", name)));
const PASSPHRASE = "correct horse battery staple";

/** The bundle `name` zipped again with its manifest passed through `change` (unsigned). */
async function rezipped(name: string, change: (manifest: Record<string, any>) => void): Promise<Uint8Array> {
  const members = unzipSync(await bundleBytes(name));
  const manifest = JSON.parse(strFromU8(members["manifest.json"]!));
  change(manifest);
  return zipSync({ ...members, "manifest.json": strToU8(JSON.stringify(manifest)) });
}

const plantThreshold = (manifest: Record<string, any>) => {
  for (const row of manifest["calibration"]["prototype"]["rows"]) row["threshold"] = -1;
};

async function withFolder(body: (folder: string) => Promise<void>): Promise<void> {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-js-46-"));
  try {
    await body(folder);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}

test("a manifest cannot plant a threshold below the floor, nor leave one behind (spec §4.3, §9.2)", async () => {
  await withFolder(async (folder) => {
    const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
    const options = { ort, store, passphrase: PASSPHRASE, scryptLog2N: 10 };
    const planted = await Verifier.create({ ...options, bundle: await loadBundle(await rezipped("voice-embedding.uvb", plantThreshold), { name: "planted.uvb" }) });
    const samples = await Promise.all([0, 1, 2, 3, 4].map((j) => clip(`speaker0-${j}.wav`)));
    await planted.enroll(samples, { user: "alice" });
    assert.equal((await planted.templates.load("alice")).threshold, THRESHOLD_FLOOR);
    const impostor = await planted.verify(await clip("speaker1-6.wav"), { user: "alice", backoff: false });
    assert.ok(impostor.score < 0 && !impostor.accepted, `accepted at ${impostor.score}`);
    // the honest bundle back: the template names another calibration, and is refused
    const honest = await Verifier.create({ ...options, bundle: await loadBundle(await bundleBytes("voice-embedding.uvb"), { name: "honest.uvb" }) });
    const refusal = { name: "ModelMismatchError", message: "user 'alice' was enrolled under another calibration than honest.uvb's: re-enroll with uvsdk enroll" };
    await assert.rejects(honest.verify(await clip("speaker1-6.wav"), { user: "alice" }), refusal);
    await assert.rejects(honest.score(await clip("speaker1-6.wav"), "alice"), ModelMismatchError);
    const none = await Verifier.create({ ...options, bundle: await loadBundle(await rezipped("voice-embedding.uvb", (m) => delete m["calibration"]), { name: "none.uvb" }) });
    await assert.rejects(none.verify(await clip("speaker1-6.wav"), { user: "alice" }), /another calibration than none\.uvb's/);
    // enrolled again under the honest bundle, the stranger is rejected
    await honest.enroll(samples, { user: "alice" });
    assert.equal((await honest.verify(await clip("speaker1-6.wav"), { user: "alice" })).accepted, false);
    // the warm-up rule alone owes nothing to a table: not bound to one
    const warmUp = await Verifier.create({ ...options, far: null, bundle: (honest as any).bundle });
    await warmUp.enroll(samples, { user: "bob" });
    assert.equal((await planted.verify(await clip("speaker0-6.wav"), { user: "bob", backoff: false })).accepted, true);
  });
});
