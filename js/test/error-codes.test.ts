// Error codes (docs/spec.md §14): every SDK error carries one, from its class or its raise site;
// tests/sdk/test_error_codes.py checks that this list, the Python SDK's and the spec's are one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  BundleError,
  ERROR_CODES,
  LockedOutError,
  MediaError,
  MemoryStore,
  SignatureError,
  Templates,
  UvsdkError,
  WrongKeyError,
  newTemplate,
} from "../src/index.js";

const PASSPHRASE = "correct horse battery staple";

test("a code comes from the class or the raise site", () => {
  assert.equal(new BundleError("x").code, "bundle.manifest");
  assert.equal(new BundleError("x", "bundle.model").code, "bundle.model");
  assert.equal(new SignatureError("x").code, "bundle.signature");
  assert.equal(new MediaError("x", "too_short").code, "media.too-short");
  assert.equal(new LockedOutError("x", 5).code, "verify.locked-out");
  assert.equal(new Set(ERROR_CODES).size, ERROR_CODES.length);
});

test("an SDK error without a code is a bug", () => {
  assert.throws(() => new UvsdkError("x"), (e: unknown) => e instanceof TypeError && /needs an error code/.test(e.message));
});

for (const offset of [8, 23, 24, 39]) {
  // the salt's and the key check's bytes: what docs/sdk.md's threat model states
  test(`an edited header (byte ${offset}) with its digest recomputed reads as a wrong passphrase`, async () => {
    const store = new MemoryStore();
    await new Templates(store, { passphrase: PASSPHRASE, scryptLog2N: 10 }).save(newTemplate("alice", 0));
    const blob = store.read("alice")!.slice();
    blob[offset]! ^= 0x01;
    blob.set(createHash("sha256").update(blob.subarray(0, 40)).digest().subarray(0, 8), 40);
    await store.write("alice", blob);
    await assert.rejects(
      new Templates(store, { passphrase: PASSPHRASE }).load("alice"),
      (e: unknown) => e instanceof WrongKeyError && e.code === "template.wrong-passphrase",
    );
    assert.deepEqual(store.read("alice"), blob);
  });
}
