// Issue 46, the fourth attack tour: each test performs one attack that used to succeed in this
// port (docs/spec.md version 6).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, open, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import { strFromU8, strToU8, unzipSync, zipSync } from "fflate";
import * as ort from "onnxruntime-node";
import { FileStore, ModelMismatchError, THRESHOLD_FLOOR, UvsdkError, Verifier, decodeWavFile, loadBundle, userLock } from "../src/node.js";

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
    const refusal = { name: "ModelMismatchError", message: `user "alice" was enrolled under another calibration than honest.uvb's: re-enroll with uvsdk enroll` };
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

test("a lock of another host is waited on with progress, then named; never broken (spec §10.1)", async () => {
  await withFolder(async (folder) => {
    const store = join(folder, "templates");
    await mkdir(store, { mode: 0o700 });
    const lock = join(store, ".alice.lock");
    await writeFile(lock, "999999 0123456789abcdef oldhost\n");
    const lines: string[] = [];
    const files = new FileStore(store, { stateDir: join(folder, "state"), lockTimeoutMs: 0, lockNoticeMs: 0, onLockWait: (line) => lines.push(line) });
    await assert.rejects(files.lock("alice"), (error: unknown) => {
      assert.ok(error instanceof UvsdkError && error.code === "store.locked");
      assert.match(error.message, /^the lock .*\.alice\.lock has been held by process 999999 on oldhost for 0 s: if no uvsdk process runs there, remove .*\.alice\.lock$/);
      return true;
    });
    assert.deepEqual(lines, [`waiting for the lock ${lock}, held by process 999999 on oldhost (giving up if one holder keeps it 0 s)`]);
    assert.equal(await readFile(lock, "utf8"), "999999 0123456789abcdef oldhost\n");
    assert.deepEqual(await readdir(store), [".alice.lock"]);
  });
});

test("a lock naming this process with another token is stale; its own is not (spec §10.1)", async () => {
  await withFolder(async (folder) => {
    const lock = join(folder, ".alice.lock");
    await writeFile(lock, `${process.pid} 0123456789abcdef ${hostname()}\n`);
    const release = await userLock(folder, "alice"); // hung forever before
    const line = await readFile(lock, "utf8");
    assert.equal(line.split(" ")[0], String(process.pid));
    assert.notEqual(line.split(" ")[1], "0123456789abcdef");
    await assert.rejects(userLock(folder, "alice", { timeoutMs: 0 }), { code: "store.locked" });
    await release();
    assert.deepEqual(await readdir(folder), []);
  });
});

test("a full disk leaves no lock file behind", async () => {
  await withFolder(async (folder) => {
    const probe = await open(join(folder, "probe"), "w");
    const prototype = Object.getPrototypeOf(probe) as { writeFile: (...args: unknown[]) => Promise<void> };
    await probe.close();
    await rm(join(folder, "probe"));
    const writeFileOriginal = prototype.writeFile;
    prototype.writeFile = async function (this: unknown, data: unknown, ...rest: unknown[]) {
      if (typeof data === "string" && data.startsWith(`${process.pid} `)) {
        throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
      }
      return writeFileOriginal.call(this, data, ...rest);
    };
    try {
      for (let i = 0; i < 3; i++) await assert.rejects(userLock(folder, "alice"), { code: "store.io", message: /ENOSPC/ });
    } finally {
      prototype.writeFile = writeFileOriginal;
    }
    assert.deepEqual(await readdir(folder), []);
  });
});

test("training claims that contradict each other are refused (spec §3.10)", async () => {
  const claims: [Record<string, unknown>, string, RegExp][] = [
    [{ epsilon: 8 }, "codeword", /'codeword' contradicts training\.privacy/],
    [{ epsilon: 1e-300, membership_eer_floor: 0 }, "prototype", /contradict each other/],
    [{ epsilon: 8, membership_eer_floor: 0 }, "prototype", /contradict each other/],
  ];
  for (const [privacy, enrollment, message] of claims) {
    const claimed = { mechanism: "distributed", delta: 1e-6, simulated_deployment: false, membership_eer_floor: 0.39, ...privacy };
    const bytes = await rezipped("voice-codeword.uvb", (m) => {
      m["training"] = { method: "feduv", privacy: claimed, enrollment };
    });
    await assert.rejects(loadBundle(bytes, { name: "t.uvb" }), { code: "bundle.manifest", message });
  }
});

test("a FIFO given as audio is refused at once, not waited on", { skip: process.platform === "win32" }, async () => {
  await withFolder(async (folder) => {
    const fifo = join(folder, "attempt.wav");
    execFileSync("mkfifo", [fifo]); // no writer ever opens it: reading it would wait forever
    await assert.rejects(decodeWavFile(fifo), { code: "media.undecodable", message: /attempt\.wav: not a regular file/ });
  });
});
