// Issue 33, the reading side (tests/sdk/test_bundle_reading.py in Python): zip entries that lie
// about their size, model.ort members the manifest does not vouch for, and hostile manifest JSON.
// Each test performs the attack on the conformance bundles; the bombs count the bytes the
// inflater produces.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { deflateSync, unzipSync } from "fflate";
import { sha256 } from "@noble/hashes/sha2.js";
import { BundleError, hex, loadBundle } from "../src/index.js";
import { crc32, inflateBounded } from "../src/archive.js";

const CONFORMANCE = fileURLToPath(new URL("../../../conformance/bundles/", import.meta.url));
const BOMB_BYTES = 8 * 1024 * 1024;
/** How far past its limit inflateBounded may go: one smallest step at the deflate maximum ratio. */
const OVERSHOOT = 256 * 1032;

function members(name: string): Record<string, Uint8Array> {
  return unzipSync(new Uint8Array(readFileSync(join(CONFORMANCE, name))));
}

interface Entry {
  name: string;
  payload: Uint8Array;
  method: number;
  size: number;
  crc: number;
  flags: number;
}

function entry(name: string, content: Uint8Array, lie: Partial<Entry> = {}): Entry {
  return { name, payload: deflateSync(content), method: 8, size: content.length, crc: crc32(content), flags: 0, ...lie };
}

/** A zip archive written entry by entry, recording whatever each entry claims. */
function zip(entries: Entry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  const central: Uint8Array[] = [];
  let offset = 0;
  for (const e of entries) {
    const name = new TextEncoder().encode(e.name);
    const local = new DataView(new ArrayBuffer(30));
    const record = new DataView(new ArrayBuffer(46));
    local.setUint32(0, 0x04034b50, true);
    record.setUint32(0, 0x02014b50, true);
    for (const [view, at] of [[local, 4], [record, 6]] as const) {
      view.setUint16(at, 20, true);
      view.setUint16(at + 2, e.flags, true);
      view.setUint16(at + 4, e.method, true);
      view.setUint16(at + 8, 0x21, true);
      view.setUint32(at + 10, e.crc, true);
      view.setUint32(at + 14, e.payload.length, true);
      view.setUint32(at + 18, e.size, true);
      view.setUint16(at + 22, name.length, true);
    }
    record.setUint16(4, 20, true);
    record.setUint32(42, offset, true);
    parts.push(new Uint8Array(local.buffer), name, e.payload);
    central.push(new Uint8Array(record.buffer), name);
    offset += 30 + name.length + e.payload.length;
  }
  const size = central.reduce((n, p) => n + p.length, 0);
  const end = new DataView(new ArrayBuffer(22));
  end.setUint32(0, 0x06054b50, true);
  end.setUint16(8, entries.length, true);
  end.setUint16(10, entries.length, true);
  end.setUint32(12, size, true);
  end.setUint32(16, offset, true);
  const all = [...parts, ...central, new Uint8Array(end.buffer)];
  const out = new Uint8Array(all.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of all) out.set(p, at), (at += p.length);
  return out;
}

function imageEntries(replaced: Record<string, Entry> = {}): Entry[] {
  return Object.entries(members("image-embedding.uvb")).map(([name, content]) => replaced[name] ?? entry(name, content));
}

function withZeros(content: Uint8Array, zeros: number): Uint8Array {
  const out = new Uint8Array(content.length + zeros);
  out.set(content);
  return out;
}

async function refused(bytes: Uint8Array, message: RegExp): Promise<void> {
  await assert.rejects(loadBundle(bytes, { name: "attack.uvb" }), (error: unknown) => {
    assert.ok(error instanceof BundleError, String(error));
    assert.match(error.message, message);
    return true;
  });
}

test("the hand-written archive loads", async () => {
  const bundle = await loadBundle(zip(imageEntries()));
  assert.equal(bundle.manifest.dim, 16);
});

for (const member of ["model.onnx", "manifest.json"]) {
  test(`${member} inflating past its declared size is refused early`, async () => {
    const content = members("image-embedding.uvb")[member]!;
    const lying = entry(member, content, { payload: deflateSync(withZeros(content, BOMB_BYTES)) });
    await refused(zip(imageEntries({ [member]: lying })), new RegExp(`${member} inflates to more than the ${content.length} bytes`));
    let produced = 0;
    const result = inflateBounded(lying.payload, content.length, (part) => void (produced += part.length));
    assert.equal(result.produced, produced);
    assert.ok(produced > content.length && produced <= content.length + 1 + OVERSHOOT, `${produced} bytes inflated`);
  });
}

test("a small declared size stops a large bomb", async () => {
  const lying = entry("manifest.json", new Uint8Array(BOMB_BYTES), { size: 1000 });
  await refused(zip(imageEntries({ "manifest.json": lying })), /inflates to more than the 1000 bytes/);
  let produced = 0;
  inflateBounded(lying.payload, 1000, (part) => void (produced += part.length));
  assert.ok(produced <= 1001 + OVERSHOOT && produced < BOMB_BYTES / 16, `${produced} bytes inflated`);
});

test("a member shorter than declared is refused", async () => {
  const model = members("image-embedding.uvb")["model.onnx"]!;
  const short = entry("model.onnx", model, { payload: deflateSync(model.subarray(0, -10)) });
  await refused(zip(imageEntries({ "model.onnx": short })), new RegExp(`holds ${model.length - 10} bytes, not the ${model.length}`));
});

test("a stored member must hold its declared size", async () => {
  const model = members("image-embedding.uvb")["model.onnx"]!;
  for (const payload of [model.subarray(0, -4), withZeros(model, 4)]) {
    await refused(zip(imageEntries({ "model.onnx": entry("model.onnx", model, { payload, method: 0 }) })), /its zip entry declares/);
  }
});

test("other lies of a zip entry are bundle errors", async () => {
  const model = members("image-embedding.uvb")["model.onnx"]!;
  const cases: [Partial<Entry>, RegExp][] = [
    [{ crc: 12345 }, /does not match its zip entry's CRC-32/],
    [{ flags: 1 }, /model\.onnx is encrypted/],
    [{ method: 12 }, /compression method 12/],
    [{ method: 99 }, /compression method 99/],
    [{ payload: new Uint8Array(64).fill(0xff) }, /not a readable bundle/],
  ];
  for (const [lie, message] of cases) await refused(zip(imageEntries({ "model.onnx": entry("model.onnx", model, lie) })), message);
  const cut = entry("model.onnx", model);
  cut.payload = cut.payload.subarray(0, cut.payload.length >> 1);
  await refused(zip(imageEntries({ "model.onnx": cut })), /not a readable bundle/);
});

// -- model.ort: present only when the manifest vouches for it ---------------------------------------

function withOrt(ort: Record<string, unknown> | null, bytes: Uint8Array): Uint8Array {
  const image = members("image-embedding.uvb");
  const manifest = JSON.parse(new TextDecoder().decode(image["manifest.json"]));
  if (ort !== null) manifest.ort = ort;
  const text = new TextEncoder().encode(JSON.stringify(manifest, null, 2));
  return zip([entry("model.onnx", image["model.onnx"]!), entry("manifest.json", text), entry("model.ort", bytes)]);
}

test("model.ort must be named in the manifest, by its name and SHA-256", async () => {
  const ort = new TextEncoder().encode("an ORT-format model");
  const digest = hex(sha256(ort));
  const bundle = await loadBundle(withOrt({ file: "model.ort", sha256: digest }, ort));
  assert.deepEqual(bundle.manifest.extra["ort"], { file: "model.ort", sha256: digest });
  await refused(withOrt(null, ort), /model\.ort is not named in the manifest/);
  await refused(withOrt({ file: "model.ort", sha256: "0".repeat(64) }, ort), /model\.ort does not match/);
  await refused(withOrt({ file: "model.onnx.ort", sha256: digest }, ort), /manifest: ort\.file must be "model\.ort"/);
  await refused(withOrt({ file: "model.ort", sha256: digest.toUpperCase() }, ort), /ort\.sha256 is not 64 lowercase/);
});

// -- hostile JSON in manifest.json --------------------------------------------------------------------

const voice = members("voice-embedding.uvb");
const manifestText = new TextDecoder().decode(voice["manifest.json"]);

function hostile(text: string): Uint8Array {
  const changed: Record<string, Uint8Array> = { ...voice, "manifest.json": new TextEncoder().encode(text) };
  delete changed["signature.ed25519"];
  return zip(Object.entries(changed).map(([name, content]) => entry(name, content)));
}

function withKey(value: string): string {
  const text = manifestText.trimEnd();
  assert.ok(text.endsWith("}"));
  return `${text.slice(0, -1)}, "extra": ${value}}`;
}

const nested = (levels: number) => "[".repeat(levels - 1) + "]".repeat(levels - 1);
const HUGE_COUNT = "1" + "0".repeat(400);

test("hostile manifest JSON is a BundleError", async () => {
  const cases: [string, string][] = [
    [manifestText.replace('"people": ', `"people": ${HUGE_COUNT}, "was": `), "number"],
    [manifestText.replace('"impostor_trials": ', `"impostor_trials": ${HUGE_COUNT}, "x": `), "number"],
    [withKey("9".repeat(4301)), "number"],
    [withKey(String(2n ** 53n)), "integer"],
    [withKey(String(-(2n ** 53n))), "integer"],
    [withKey("0." + "1".repeat(63)), "number"],
    [withKey(nested(65)), "nested"],
    [withKey(nested(100_000)), "nested"],
  ];
  for (const [text, word] of cases) await refused(hostile(text), new RegExp(`manifest\\.json is not valid JSON .*${word}`));
});

test("JSON at the limits is accepted", async () => {
  const values = [
    String(2n ** 53n - 1n),
    String(-(2n ** 53n - 1n)),
    "0." + "1".repeat(62),
    "1e400",
    nested(64),
    '"' + "[".repeat(100) + '"',
    '"\\"' + "{".repeat(100) + '"',
  ];
  for (const value of values) {
    const bundle = await loadBundle(hostile(withKey(value)));
    assert.ok(bundle.manifest.calibration !== null && "extra" in bundle.manifest.extra, value.slice(0, 40));
  }
});
