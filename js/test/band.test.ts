// `input.band` (spec §3.4, issue 44): what an audio model's front end hears, optional and wide
// by default; a narrow-band bundle says so, and anything else is refused in one line.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { BundleError, parseManifest } from "../src/index.js";
import { parseJson } from "../src/json.js";

const VECTORS = fileURLToPath(new URL("../../../conformance/vectors/bundle.json", import.meta.url));

test("input.band: absent is wide, narrow is kept, anything else is a one-line BundleError", async () => {
  const base = JSON.parse(await readFile(VECTORS, "utf8")).base_manifest;
  const withBand = (band: unknown) => parseJson(JSON.stringify({ ...base, input: { ...base.input, band } }));
  const plain = parseManifest(parseJson(JSON.stringify(base))).input;
  assert.equal(plain.kind === "audio" && plain.band, "wide");
  const narrow = parseManifest(withBand("narrow")).input;
  assert.equal(narrow.kind === "audio" && narrow.band, "narrow");
  for (const [band, message] of [
    ["fm", 'manifest: input.band "fm" is not one of wide, narrow'],
    [null, "manifest: input.band must be a string, not null"],
    [8000, "manifest: input.band must be a string, not 8000"],
  ] as const) {
    assert.throws(
      () => parseManifest(withBand(band)),
      (error: unknown) => error instanceof BundleError && error.message === message && error.code === "bundle.manifest",
    );
  }
});
