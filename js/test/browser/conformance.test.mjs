// Every conformance vector (conformance/vectors/*.json) in Chromium, on onnxruntime-web and the
// browser's WebCrypto, through the shared runner (web/conformance-runner.js) that
// test/conformance.test.mjs runs under Node. One subtest per vector, named `file: vector`, so a
// failure names its file and vector. Chromium: $CHROMIUM or /usr/bin/chromium; skipped without one (chromium.mjs).
import { test } from "node:test";
import assert from "node:assert/strict";
import { gotoAndWait, serveAndLaunch, skipOption, watch } from "./chromium.mjs";
import { FILES } from "../../web/conformance-runner.js";

test("conformance vectors in Chromium (onnxruntime-web)", { skip: skipOption() }, async (t) => {
  const { server, browser } = await serveAndLaunch(t);
  const page = await browser.newPage();
  const log = watch(page);
  // as long as vectors keep finishing (a row each), however slowly
  await gotoAndWait(page, new URL("conformance.html", server.url).href, "the conformance run", () => window.uvsdkConformance !== undefined);
  const run = await page.evaluate(() => window.uvsdkConformance);
  assert.equal(run.error, undefined, `the run stopped: ${run.error}\n${log.join("\n")}`);
  t.diagnostic(`${run.results.length} vectors, ${run.userAgent}, onnxruntime-web ${run.ortVersion}`);
  for (const file of FILES) assert.ok(run.results.some((r) => r.file === file), `no vector ran from ${file}.json`);
  const names = run.results.map((r) => `${r.file}: ${r.name}`);
  assert.equal(new Set(names).size, names.length, "two vectors share a name");
  for (const r of run.results) await t.test(`${r.file}: ${r.name}`, () => assert.ok(r.ok, r.message));
});
