// js/README.md quotes what the page says about the shipped default bundle; a figure a user can
// re-run is checked here, not typed: the quoted calibration line must be the one the page's own
// code (web/wording.js) gives for sdk/uvsdk/data/default.uvb at the FAR the page enrolls
// with, and the README quotes no other "measured on N people" figure for it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { DEFAULT_FAR, loadBundle } from "../dist/src/index.js";
import { calibrationSummary, tableInUse } from "../web/wording.js";

const README = fileURLToPath(new URL("../README.md", import.meta.url));
const DEFAULT_BUNDLE = fileURLToPath(new URL("../../sdk/uvsdk/data/default.uvb", import.meta.url));

test("js/README quotes the page's calibration line for the shipped default bundle as the page shows it", async () => {
  const readme = await readFile(README, "utf8");
  const bundle = await loadBundle(new Uint8Array(await readFile(DEFAULT_BUNDLE)), { name: "default.uvb" });
  const { manifest } = bundle;
  const table = tableInUse(manifest.calibration, manifest.outputKind);
  assert.ok(table, "the default bundle is calibrated");
  const { text } = calibrationSummary(table, DEFAULT_FAR);
  const quoted = [...readme.matchAll(/`(Stated false-accept rates?: [^`]*)`/g)].map((m) => m[1]);
  assert.deepEqual(quoted, [text], "README's quoted calibration line");
  const people = [...readme.matchAll(/measured on ([\d,]+) people/g)].map((m) => m[1]);
  assert.deepEqual([...new Set(people)], [table.people.toLocaleString("en-US")], "every 'measured on N people' in the README");
});
