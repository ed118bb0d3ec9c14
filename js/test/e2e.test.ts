// End to end under Node: FileStore in a temporary folder, a conformance bundle, enrollment from
// five WAV clips, verification, wrong passphrase, a tampered file, lock-out after five failures.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import {
  FileStore,
  LockedOutError,
  TemplateError,
  Verifier,
  WrongKeyError,
  NotEnrolledError,
  decodeWavFile,
  loadBundle,
  type Bundle,
} from "../src/node.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/", import.meta.url));
const clip = async (name: string) => (await decodeWavFile(join(CONFORMANCE, "audio", name))).samples;

async function setup(passphrase = "correct horse battery staple", clock = () => 1_700_000_000) {
  const bytes = new Uint8Array(await readFile(join(CONFORMANCE, "bundles", "voice-embedding.uvb")));
  const key = (await readFile(join(CONFORMANCE, "keys", "conformance.pub.hex"), "utf8")).trim();
  const bundle: Bundle = await loadBundle(bytes, { trustedKeys: [Buffer.from(key, "hex")], name: "voice-embedding.uvb" });
  assert.ok(bundle.signedBy);
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-js-"));
  const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
  const verifier = await Verifier.create({ ort, bundle, store, passphrase, scryptLog2N: 10, clock });
  return { bundle, folder, store, verifier };
}

test("enroll, verify, wrong passphrase, tampering, lock-out", async () => {
  let now = 1_700_000_000;
  const { bundle, folder, store, verifier } = await setup(undefined, () => now);
  try {
    const samples = await Promise.all([0, 1, 2, 3, 4].map((j) => clip(`speaker0-${j}.wav`)));
    const report = await verifier.enroll(samples, { user: "alice" });
    assert.equal(report.used, 5);
    assert.equal(report.mode, "prototype");
    assert.equal(JSON.stringify(report).includes("threshold"), false, "the report holds no threshold");
    const file = join(store.directory, "alice.uvt");
    assert.equal((await stat(file)).mode & 0o777, 0o600);

    const genuine = await verifier.verify(await clip("speaker0-6.wav"), { user: "alice" });
    assert.equal(genuine.accepted, true);
    const impostor = await verifier.verify(await clip("speaker1-6.wav"), { user: "alice" });
    assert.equal(impostor.accepted, false);

    // another verifier, wrong passphrase
    const wrong = await Verifier.create({ ort, bundle, store, passphrase: "not it", scryptLog2N: 10 });
    await assert.rejects(wrong.verify(await clip("speaker0-6.wav"), { user: "alice" }), WrongKeyError);

    // five rejections lock the user out; the lock holds for a fresh verifier too
    const other = await clip("speaker2-6.wav");
    for (let i = 0; i < 4; i++) {
      // one failure is already recorded (the impostor above)
      const decision = await verifier.verify(other, { user: "alice" });
      assert.equal(decision.accepted, false);
      now += 1;
    }
    await assert.rejects(verifier.verify(await clip("speaker0-6.wav"), { user: "alice" }), (error: unknown) => {
      assert.ok(error instanceof LockedOutError);
      assert.equal(error.until, now - 1 + 30);
      return true;
    });
    const fresh = await Verifier.create({ ort, bundle, store, passphrase: "correct horse battery staple", clock: () => now });
    await assert.rejects(fresh.verify(await clip("speaker0-6.wav"), { user: "alice" }), LockedOutError);
    now += 31; // after the lock-out the genuine user gets in, and the count is reset
    assert.equal((await fresh.verify(await clip("speaker0-7.wav"), { user: "alice" })).accepted, true);

    // a tampered file (one ciphertext byte) is refused as modified
    const blob = await readFile(file);
    blob[blob.length - 20]! ^= 1;
    await writeFile(file, blob);
    await assert.rejects(fresh.verify(await clip("speaker0-6.wav"), { user: "alice" }), (error: unknown) => {
      assert.ok(error instanceof TemplateError && !(error instanceof WrongKeyError));
      assert.match(error.message, /modified or is damaged/);
      return true;
    });

    await verifier.delete("alice");
    await assert.rejects(verifier.verify(await clip("speaker0-6.wav"), { user: "alice" }), NotEnrolledError);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});

test("a rolled-back template is refused", async () => {
  const { folder, store, verifier } = await setup();
  try {
    const samples = await Promise.all([0, 1, 2, 3, 4].map((j) => clip(`speaker1-${j}.wav`)));
    await verifier.enroll(samples, { user: "bob" });
    const file = join(store.directory, "bob.uvt");
    const old = await readFile(file);
    await verifier.verify(await clip("speaker1-6.wav"), { user: "bob" });
    await writeFile(file, old);
    const fresh = await Verifier.create({ ort, bundle: verifier.bundle, store, passphrase: "correct horse battery staple" });
    await assert.rejects(fresh.verify(await clip("speaker1-6.wav"), { user: "bob" }), { name: "RollbackError" });
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});
