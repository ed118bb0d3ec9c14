// The platform-neutral conformance runner (web/conformance-runner.js) under Node with
// onnxruntime-node: the same code the browser test runs in Chromium, so a vector that fails only
// there is the browser's (onnxruntime-web, WebCrypto), not the runner's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import * as ort from "onnxruntime-node";
import * as uv from "../dist/src/index.js";
import { runConformance } from "../web/conformance-runner.js";

const ROOT = new URL("../../", import.meta.url);
const read = async (path) => new Uint8Array(await readFile(new URL(path, path.startsWith("sdk/") ? ROOT : new URL("conformance/", ROOT))));

test("conformance vectors through the shared runner (onnxruntime-node)", async (t) => {
  const results = await runConformance({ uv, ort, readFile: read });
  assert.ok(results.length > 200, `${results.length} vectors`);
  const failed = results.filter((r) => !r.ok);
  for (const r of failed) t.diagnostic(`FAIL ${r.file}: ${r.name}: ${r.message}`);
  assert.equal(failed.length, 0, failed.map((r) => `${r.file}: ${r.name}: ${r.message}`).join("\n"));
});
