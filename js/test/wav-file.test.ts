// Issue 33: decodeWavFile reads a WAV file's header before its samples, and refuses a file too
// long for maxSeconds (media.load_audio's limit) having read only that header. The reads are
// counted through node:fs (the file is sparse: 8 MiB of samples on no disk).
import { test } from "node:test";
import assert from "node:assert/strict";
import fs, { promises } from "node:fs";
import { mkdtemp, open, rm, truncate, writeFile } from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MediaError } from "../src/index.js";
import { decodeWavFile } from "../src/node.js";

const SAMPLE_BYTES = 8 * 1024 * 1024;

function header(dataBytes: number): Uint8Array {
  const view = new DataView(new ArrayBuffer(44));
  const text = (at: number, value: string) => [...value].forEach((c, i) => view.setUint8(at + i, c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, 36 + dataBytes, true);
  text(8, "WAVE");
  text(12, "fmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, 16000, true);
  view.setUint32(28, 32000, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  text(36, "data");
  view.setUint32(40, dataBytes, true);
  return new Uint8Array(view.buffer);
}

/** Count the bytes node:fs reads while `action` runs (readFile, readSync, FileHandle.read). */
async function bytesRead(action: () => Promise<unknown>): Promise<number> {
  let count = 0;
  const probe = await open(process.execPath, "r");
  const handlePrototype = Object.getPrototypeOf(probe) as { read: (...args: unknown[]) => Promise<{ bytesRead: number }> };
  await probe.close();
  const original = { readFile: promises.readFile, readSync: fs.readSync, read: handlePrototype.read };
  promises.readFile = (async (...args: Parameters<typeof promises.readFile>) => {
    const data = await original.readFile(...args);
    count += data.length;
    return data;
  }) as typeof promises.readFile;
  fs.readSync = ((...args: Parameters<typeof fs.readSync>) => {
    const n = (original.readSync as (...a: unknown[]) => number)(...args);
    count += n;
    return n;
  }) as typeof fs.readSync;
  handlePrototype.read = async function (this: unknown, ...args: unknown[]) {
    const result = await original.read.apply(this, args);
    count += result.bytesRead;
    return result;
  };
  syncBuiltinESMExports();
  try {
    await action().catch(() => undefined);
  } finally {
    promises.readFile = original.readFile;
    fs.readSync = original.readSync;
    handlePrototype.read = original.read;
    syncBuiltinESMExports();
  }
  return count;
}

test("a WAV file too long for maxSeconds is refused having read only its header", async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-wav-"));
  try {
    const file = join(folder, "long.wav");
    await writeFile(file, header(SAMPLE_BYTES));
    await truncate(file, 44 + SAMPLE_BYTES); // 262 s of silence at 16 kHz, sparse
    await assert.rejects(decodeWavFile(file), (error: unknown) => {
      assert.ok(error instanceof MediaError && error.reason === "too_long", String(error));
      assert.equal(error.message, "long.wav: 262.1 s long, at most 60 s accepted");
      return true;
    });
    const read = await bytesRead(() => decodeWavFile(file));
    assert.ok(read > 0 && read <= 1024, `${read} bytes read`);
    const accepted = await decodeWavFile(file, { maxSeconds: 300 });
    assert.equal(accepted.samples.length, SAMPLE_BYTES / 2);
    assert.ok((await bytesRead(() => decodeWavFile(file, { maxSeconds: 300 }))) >= SAMPLE_BYTES);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});

test("a truncated, a non-WAV and a missing file are MediaErrors", async () => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-wav-"));
  try {
    await writeFile(join(folder, "cut.wav"), header(1000));
    await writeFile(join(folder, "text.wav"), "hello, world");
    const cases: [string, RegExp][] = [
      ["cut.wav", /truncated: the file is shorter than its header says \(data chunk: 1000 bytes announced, 0 present\)/],
      ["text.wav", /not a readable audio file \(not a RIFF\/WAVE file\)/],
      ["none.wav", /no such file/],
      [".", /not a regular file/],
    ];
    for (const [name, message] of cases) {
      await assert.rejects(decodeWavFile(join(folder, name)), (error: unknown) => error instanceof MediaError && message.test(error.message));
    }
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
});
