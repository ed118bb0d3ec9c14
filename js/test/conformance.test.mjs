// Every conformance vector (conformance/vectors/*.json, conformance/README.md) under Node with
// onnxruntime-node, through the platform-neutral runner web/conformance-runner.js: the same code
// that test/browser/conformance.test.mjs runs in Chromium, so a vector that fails only there is
// the browser's (onnxruntime-web, WebCrypto), not the runner's. One subtest per vector, named
// `file: vector`. `npm test` builds dist/ first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import * as ort from "onnxruntime-node";
import * as uv from "../dist/src/index.js";
import { FILES, runConformance } from "../web/conformance-runner.js";

const ROOT = new URL("../../", import.meta.url);
const read = async (path) => new Uint8Array(await readFile(new URL(path, path.startsWith("sdk/") ? ROOT : new URL("conformance/", ROOT))));

test("conformance vectors (onnxruntime-node)", async (t) => {
  const results = await runConformance({ uv, ort, readFile: read });
  t.diagnostic(`${results.length} vectors`);
  for (const file of FILES) assert.ok(results.some((r) => r.file === file), `no vector ran from ${file}.json`);
  const names = results.map((r) => `${r.file}: ${r.name}`);
  assert.equal(new Set(names).size, names.length, "two vectors share a name");
  for (const r of results) await t.test(`${r.file}: ${r.name}`, () => assert.ok(r.ok, r.message));
});
