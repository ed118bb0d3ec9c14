// Issue 33, the store side, under Node: each test performs one attack on FileStore. Parallel
// processes score no more attempts than the back-off allows (the lock file the Python SDK takes
// too; tests/sdk/test_store_attacks.py runs Python and Node processes together); a store,
// freshness folder or template another user can write is refused with the chmod to run; a FIFO
// in a template's place never blocks; a lock left by a crashed process is recovered.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import {
  BackoffPolicy,
  FileStore,
  StorePermissionError,
  TemplateError,
  Templates,
  Verifier,
  decodeWavFile,
  loadBundle,
  userLock,
} from "../src/node.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/", import.meta.url));
const DIST = fileURLToPath(new URL("../", import.meta.url));
const BUNDLE = join(CONFORMANCE, "bundles", "voice-embedding.uvb");
const IMPOSTOR = join(CONFORMANCE, "audio", "speaker1-6.wav");
const PASSPHRASE = "correct horse battery staple";
/** A lock-out far longer than any test, so the count never depends on how long processes take. */
const LONG_LOCKOUT = new BackoffPolicy(5, 86400, 2, 86400);
/** One impostor attempt in a process of its own: exit 1 rejected, 2 refused (one line on stderr). */
const NODE_VERIFY = `
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
const [dist, bundlePath, store, stateDir, user, clip] = process.argv.slice(1);
const uvsdk = await import(pathToFileURL(dist + "/src/node.js").href);
const ort = await import("onnxruntime-node");
try {
  const bundle = await uvsdk.loadBundle(new Uint8Array(await readFile(bundlePath)), { name: "b.uvb" });
  const verifier = await uvsdk.Verifier.create({
    ort, bundle, store: new uvsdk.FileStore(store, { stateDir }), passphrase: process.env.UVSDK_PASSPHRASE });
  const { samples } = await uvsdk.decodeWavFile(clip);
  const decision = await verifier.verify(samples, { user });
  console.log(decision.accepted ? "ACCEPT" : "REJECT");
  process.exitCode = decision.accepted ? 0 : 1;
} catch (error) {
  if (!(error instanceof uvsdk.UvsdkError)) throw error;
  console.error("uvsdk: error: " + error.message);
  process.exitCode = 2;
}
`;

async function enrolled(): Promise<{ folder: string; store: FileStore; verifier: Verifier }> {
  const bundle = await loadBundle(new Uint8Array(await readFile(BUNDLE)), { name: "voice-embedding.uvb" });
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-store-"));
  const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
  const verifier = await Verifier.create({ ort, bundle, store, passphrase: PASSPHRASE, scryptLog2N: 10, backoff: LONG_LOCKOUT });
  const samples = await Promise.all([0, 1, 2, 3, 4].map(async (j) => (await decodeWavFile(join(CONFORMANCE, "audio", `speaker0-${j}.wav`))).samples));
  await verifier.enroll(samples, { user: "alice" });
  return { folder, store, verifier };
}

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a process to its end (its own process group, killed with the test if it is still there). */
function run(t: { after: (f: () => void) => void }, command: string, args: string[]): Promise<Finished> {
  const child = spawn(command, args, {
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
    env: { ...process.env, UVSDK_PASSPHRASE: PASSPHRASE },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  t.after(() => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // ended already
    }
  });
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

test("parallel Node processes score no more attempts than the back-off allows", async (t) => {
  const { store } = await enrolled();
  const args = ["--input-type=module", "-e", NODE_VERIFY, "--", DIST, BUNDLE, store.directory, store.stateDir, "alice", IMPOSTOR];
  const results = await Promise.all(Array.from({ length: 12 }, () => run(t, process.execPath, args)));
  const scored = results.filter((r) => r.code === 1 && r.stdout.includes("REJECT")).length;
  const refused = results.filter((r) => r.code === 2 && r.stderr.includes("locked out")).length;
  assert.equal(scored + refused, results.length, JSON.stringify(results));
  assert.equal(scored, LONG_LOCKOUT.attempts);
  const template = await new Templates(store, { passphrase: PASSPHRASE }).load("alice");
  assert.equal(template.backoff.failures, scored);
  assert.deepEqual(await readdir(store.directory), ["alice.uvt"]);
});

test("a lock left by a crashed process is recovered; another holder is waited for", async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-lock-"));
  const crashed = spawnSync(process.execPath, ["-e", "console.log(process.pid)"], { encoding: "utf8" });
  await writeFile(join(folder, ".alice.lock"), `${crashed.stdout.trim()} 0123456789abcdef ${hostname()}\n`);
  const release = await userLock(folder, "alice");
  assert.equal((await readFile(join(folder, ".alice.lock"), "latin1")).split(" ")[0], String(process.pid));
  const order: string[] = [];
  const second = userLock(folder, "alice").then(async (releaseSecond) => {
    order.push("second");
    await releaseSecond();
  });
  const bob = await userLock(folder, "bob"); // another user's lock is free
  order.push("bob");
  await bob();
  order.push("released");
  await release();
  await second;
  assert.deepEqual(order, ["bob", "released", "second"]);
  assert.deepEqual(await readdir(folder), []);
});

test("a store or template other users can write, or another user's, is refused", async () => {
  const { store, verifier } = await enrolled();
  const impostor = (await decodeWavFile(IMPOSTOR)).samples;
  for (const mode of [0o777, 0o770, 0o702]) {
    await chmod(store.directory, mode);
    await assert.rejects(verifier.verify(impostor, { user: "alice" }), (error: Error) => {
      assert.ok(error instanceof StorePermissionError, String(error));
      assert.match(error.message, /writable by other users/);
      assert.ok(error.message.endsWith(`run chmod go-w ${store.directory}`), error.message);
      return true;
    });
  }
  await chmod(store.directory, 0o700);
  const file = join(store.directory, "alice.uvt");
  await chmod(file, 0o666);
  await assert.rejects(verifier.verify(impostor, { user: "alice" }), /alice\.uvt is writable by other users \(mode 0666\).*run chmod 600/);
  await chmod(file, 0o600);
  if (process.geteuid?.() === 0) {
    await chown(file, 65534, 65534);
    await assert.rejects(verifier.verify(impostor, { user: "alice" }), /alice\.uvt belongs to another user \(uid 65534\)/);
    await chown(file, 0, 0);
    await chown(store.directory, 65534, 65534);
    await assert.rejects(verifier.verify(impostor, { user: "alice" }), StorePermissionError);
    await chown(store.directory, 0, 0);
  }
  assert.equal((await verifier.verify(impostor, { user: "alice" })).accepted, false);
});

test("a state or freshness folder other users can write is refused", async () => {
  const { store, verifier } = await enrolled();
  const impostor = (await decodeWavFile(IMPOSTOR)).samples;
  for (const folder of [store.stateDir, join(store.stateDir, "freshness")]) {
    await chmod(folder, 0o777);
    await assert.rejects(verifier.verify(impostor, { user: "alice" }), (error: Error) => {
      assert.ok(error instanceof StorePermissionError, String(error));
      assert.ok(error.message.endsWith(`run chmod go-w ${folder}`), error.message);
      return true;
    });
    await chmod(folder, 0o700);
  }
  const [record] = await readdir(join(store.stateDir, "freshness"));
  await chmod(join(store.stateDir, "freshness", record!), 0o666);
  await assert.rejects(verifier.verify(impostor, { user: "alice" }), /is writable by other users \(mode 0666\).*run chmod 600/);
});

test("a FIFO in a template's or a freshness record's place is refused at once", { skip: spawnSync("mkfifo", ["--version"]).error !== undefined }, async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-fifo-"));
  const store = new FileStore(join(folder, "templates"), { stateDir: join(folder, "state") });
  await mkdir(store.directory, { mode: 0o700 });
  await mkdir(join(store.stateDir, "freshness"), { recursive: true, mode: 0o700 });
  assert.equal(spawnSync("mkfifo", [join(store.directory, "alice.uvt")]).status, 0);
  await assert.rejects(Promise.resolve(store.read("alice")), (error: Error) => {
    assert.ok(error instanceof TemplateError && /alice\.uvt is not a regular file/.test(error.message), String(error));
    return true;
  });
  assert.equal(spawnSync("mkfifo", [join(store.stateDir, "freshness", "ab.gen")]).status, 0);
  await assert.rejects(store.getGeneration("ab"), /ab\.gen is not a regular file/);
});
