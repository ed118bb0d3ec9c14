/**
 * Bounded reading of a bundle's zip members (sdk/uvsdk/archive.py): no entry may cost more than it
 * declares.
 *
 * The zip directory states each entry's inflated size; nothing makes the deflate stream agree. A
 * reader that inflates whole entries pays for whatever the stream holds (a 2 MB archive can
 * inflate to gigabytes). Here the zip directory is parsed as Python's `zipfile` parses it, and
 * every entry named in the limits is inflated in bounded steps, stopping as soon as it has yielded
 * more than it declares; it must yield exactly its declared size, end its deflate stream and match
 * its CRC-32 (spec §3.1). Internal.
 */
import { Inflate } from "fflate";
import { BundleError } from "./errors.js";

const END_SIGNATURE = 0x06054b50;
const END_BYTES = 22;
const LOCATOR_SIGNATURE = 0x07064b50;
const LOCATOR_BYTES = 20;
const END64_SIGNATURE = 0x06064b50;
const END64_BYTES = 56;
const CENTRAL_SIGNATURE = 0x02014b50;
const CENTRAL_BYTES = 46;
const LOCAL_SIGNATURE = 0x04034b50;
const LOCAL_BYTES = 30;
const MAX_COMMENT = 0xffff;
const ENCRYPTED = 0x1;
const UTF8_NAME = 0x800;
const STORED = 0;
const DEFLATED = 8;
const FULL = 0xffffffff;
/** The most bytes one byte of a deflate stream can inflate to (258 bytes per 2 bits, and some). */
const MAX_INFLATION = 1032;
/** Compressed bytes given to the inflater at a time: at most this, at least the smaller. */
const PUSH_BYTES = [256, 64 * 1024] as const;

/** An archive that cannot be read (Python: zipfile.BadZipFile, EOFError, zlib.error). */
class Unreadable extends Error {}

/** One entry of the zip directory, as zipfile.ZipInfo holds it. */
interface Entry {
  name: string;
  rawName: Uint8Array;
  flags: number;
  method: number;
  crc: number;
  compressedSize: number;
  size: number;
  headerOffset: number;
}

/**
 * `archive.read_zip_members`: the members of the zip archive `bytes` named in `limits`, each
 * checked and bounded. Throws BundleError, naming `bundle`: an unreadable archive, a member named
 * twice, over its limit, encrypted, neither stored nor deflated, whose data run past the end of
 * the archive, not its declared size, or not matching its CRC-32.
 */
export function readZipMembers(bytes: Uint8Array, limits: Record<string, number>, bundle: string): Record<string, Uint8Array> {
  try {
    const members: Record<string, Uint8Array> = Object.create(null) as Record<string, Uint8Array>;
    const entries = centralDirectory(bytes).filter((entry) => Object.hasOwn(limits, entry.name));
    // A member named twice (or many entries pointing at one member's data) would be read, and
    // inflated, once per entry: refused before anything is read, so every member is read once
    // and reading costs at most the sum of the limits (spec §3.1).
    const seen = new Set<string>();
    for (const entry of entries) {
      // one pass: a directory may hold 100,000 entries of one name
      if (seen.has(entry.name)) {
        throw new BundleError(`${bundle}: the zip directory names ${entry.name} more than once (a bundle's members are unique)`, "bundle.unreadable");
      }
      seen.add(entry.name);
    }
    for (const entry of entries) {
      checkEntry(entry, limits[entry.name]!, bundle);
      const start = dataOffset(bytes, entry);
      const content = entry.method === STORED ? readStored(bytes, start, entry, bundle) : readDeflated(bytes, start, entry, bundle);
      if (crc32(content) !== entry.crc) {
        throw new BundleError(`${bundle}: ${entry.name} does not match its zip entry's CRC-32 (damaged)`, "bundle.unreadable");
      }
      members[entry.name] = content;
    }
    return members;
  } catch (error) {
    if (error instanceof BundleError) throw error;
    const detail = error instanceof Error ? error.message : String(error);
    throw new BundleError(`${bundle}: not a readable bundle (truncated or corrupt: ${detail})`, "bundle.unreadable");
  }
}

/** The message refusing `member` of `size` bytes, over its `limit`. */
export function tooLarge(bundle: string, member: string, size: number, limit: number): string {
  return `${bundle}: ${member} is ${size} bytes, more than the ${limit} accepted (not a bundle?)`;
}

function checkEntry(entry: Entry, limit: number, bundle: string): void {
  if (entry.size > limit) throw new BundleError(tooLarge(bundle, entry.name, entry.size, limit), "bundle.unreadable");
  if (entry.flags & ENCRYPTED) throw new BundleError(`${bundle}: ${entry.name} is encrypted (a bundle's members are not)`, "bundle.unreadable");
  if (entry.method !== STORED && entry.method !== DEFLATED) {
    throw new BundleError(
      `${bundle}: ${entry.name} uses zip compression method ${entry.method} (a bundle's members are stored or deflated)`, "bundle.unreadable",
    );
  }
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** `zipfile._EndRecData`: the end of central directory record: [position, entries, size, offset, zip64]. */
function endRecord(bytes: Uint8Array): { at: number; size: number; offset: number; zip64: boolean } {
  const data = view(bytes);
  let at = -1;
  const last = bytes.length - END_BYTES;
  if (last >= 0 && data.getUint32(last, true) === END_SIGNATURE && data.getUint16(last + 20, true) === 0) at = last;
  else {
    // the last signature in the last 64 KiB + 22 bytes, as bytes.rfind: one too near the end is corrupt
    for (let i = bytes.length - 4; i >= Math.max(0, bytes.length - MAX_COMMENT - 1 - END_BYTES); i--) {
      if (data.getUint32(i, true) === END_SIGNATURE) {
        at = i;
        break;
      }
    }
  }
  if (at < 0 || at > last) throw new Unreadable("File is not a zip file");
  let size = data.getUint32(at + 12, true);
  let offset = data.getUint32(at + 16, true);
  const locator = at - LOCATOR_BYTES;
  if (locator < 0 || data.getUint32(locator, true) !== LOCATOR_SIGNATURE) return { at, size, offset, zip64: false };
  if (data.getUint32(locator + 4, true) !== 0 || data.getUint32(locator + 16, true) > 1) {
    throw new Unreadable("zipfiles that span multiple disks are not supported");
  }
  const record = locator - END64_BYTES;
  if (record < 0 || data.getUint32(record, true) !== END64_SIGNATURE) return { at, size, offset, zip64: false };
  size = Number(data.getBigUint64(record + 40, true));
  offset = Number(data.getBigUint64(record + 48, true));
  return { at, size, offset, zip64: true };
}

/** `zipfile.ZipFile._RealGetContents`: the entries of the central directory, in order. */
function centralDirectory(bytes: Uint8Array): Entry[] {
  if (bytes.length < END_BYTES) throw new Unreadable("File is not a zip file");
  const end = endRecord(bytes);
  const concat = end.at - end.size - end.offset - (end.zip64 ? END64_BYTES + LOCATOR_BYTES : 0);
  const start = end.offset + concat;
  if (start < 0) throw new Unreadable("Bad offset for central directory");
  const directory = bytes.subarray(start, start + end.size);
  const data = view(directory);
  const entries: Entry[] = [];
  for (let at = 0; at < end.size; ) {
    if (at + CENTRAL_BYTES > directory.length) throw new Unreadable("Truncated central directory");
    if (data.getUint32(at, true) !== CENTRAL_SIGNATURE) throw new Unreadable("Bad magic number for central directory");
    const nameLength = data.getUint16(at + 28, true);
    const extraLength = data.getUint16(at + 30, true);
    const commentLength = data.getUint16(at + 32, true);
    const flags = data.getUint16(at + 8, true);
    const rawName = directory.subarray(at + CENTRAL_BYTES, at + CENTRAL_BYTES + nameLength);
    const extra = directory.subarray(at + CENTRAL_BYTES + nameLength, at + CENTRAL_BYTES + nameLength + extraLength);
    const sizes = zip64Sizes(extra, data.getUint32(at + 24, true), data.getUint32(at + 20, true), data.getUint32(at + 42, true));
    entries.push({
      name: entryName(rawName, flags),
      rawName,
      flags,
      method: data.getUint16(at + 10, true),
      crc: data.getUint32(at + 16, true),
      compressedSize: sizes[1],
      size: sizes[0],
      headerOffset: sizes[2] + concat,
    });
    at += CENTRAL_BYTES + nameLength + extraLength + commentLength;
  }
  return entries;
}

/** `ZipInfo._decodeExtra`: [size, compressed size, header offset], from the zip64 field where full. */
function zip64Sizes(extra: Uint8Array, size: number, compressedSize: number, headerOffset: number): [number, number, number] {
  const values = [size, compressedSize, headerOffset];
  const data = view(extra);
  for (let at = 0; at + 4 <= extra.length; ) {
    const id = data.getUint16(at, true);
    const length = data.getUint16(at + 2, true);
    if (at + 4 + length > extra.length) throw new Unreadable(`Corrupt extra field ${id.toString(16).padStart(4, "0")} (size=${length})`);
    if (id === 1) {
      let field = at + 4;
      for (let i = 0; i < 3; i++) {
        if (values[i] !== FULL) continue;
        if (field + 8 > at + 4 + length) throw new Unreadable("Corrupt zip64 extra field");
        values[i] = Number(data.getBigUint64(field, true));
        field += 8;
      }
    }
    at += 4 + length;
  }
  return values as [number, number, number];
}

/** A directory name as zipfile decodes it (UTF-8, else code page 437), cut at a NUL. */
function entryName(raw: Uint8Array, flags: number): string {
  // Code page 437 agrees with ASCII below 0x80 and maps every other byte outside ASCII, as
  // windows-1252 ("latin1") does: for the member names compared here (ASCII) both answer alike.
  const name = new TextDecoder(flags & UTF8_NAME ? "utf-8" : "latin1", { fatal: true }).decode(raw);
  const nul = name.indexOf("\0");
  return nul >= 0 ? name.slice(0, nul) : name;
}

/** Where the entry's data start: after its local header, which must name it. */
function dataOffset(bytes: Uint8Array, entry: Entry): number {
  const at = entry.headerOffset;
  if (at < 0 || at + LOCAL_BYTES > bytes.length) throw new Unreadable("a local header is cut short");
  const data = view(bytes);
  if (data.getUint32(at, true) !== LOCAL_SIGNATURE) throw new Unreadable(`bad local header of ${entry.name}`);
  const nameLength = data.getUint16(at + 26, true);
  const extraLength = data.getUint16(at + 28, true);
  const name = bytes.subarray(at + LOCAL_BYTES, at + LOCAL_BYTES + nameLength);
  if (name.length !== entry.rawName.length || name.some((b, i) => b !== entry.rawName[i])) {
    throw new Unreadable(`the local header of ${entry.name} names another file`);
  }
  return at + LOCAL_BYTES + nameLength + extraLength;
}

function sizeMismatch(bundle: string, entry: Entry, size: number): BundleError {
  return new BundleError(`${bundle}: ${entry.name} holds ${size} bytes, not the ${entry.size} its zip entry declares (damaged?)`, "bundle.unreadable");
}

function readStored(bytes: Uint8Array, start: number, entry: Entry, bundle: string): Uint8Array {
  if (entry.compressedSize !== entry.size) throw sizeMismatch(bundle, entry, entry.compressedSize);
  if (start + entry.size > bytes.length) throw new Unreadable(`${entry.name} is cut short`);
  return bytes.slice(start, start + entry.size);
}

function readDeflated(bytes: Uint8Array, start: number, entry: Entry, bundle: string): Uint8Array {
  const end = start + entry.compressedSize;
  if (end > bytes.length) {
    throw new BundleError(
      `${bundle}: ${entry.name}'s zip entry declares ${entry.compressedSize} compressed bytes, more than the archive holds after it (damaged?)`,
      "bundle.unreadable",
    );
  }
  const content = new Uint8Array(entry.size);
  let at = 0;
  const result = inflateBounded(bytes.subarray(start, end), entry.size, (part) => {
    if (at + part.length <= content.length) content.set(part, at);
    at += part.length;
  });
  if (result.produced > entry.size) {
    throw new BundleError(
      `${bundle}: ${entry.name} inflates to more than the ${entry.size} bytes its zip entry declares (not a bundle?)`, "bundle.unreadable",
    );
  }
  if (!result.ended) throw new Unreadable(`the deflate stream of ${entry.name} is cut short`);
  if (result.produced !== entry.size) throw sizeMismatch(bundle, entry, result.produced);
  return content;
}

/**
 * Inflate the raw deflate stream `compressed` into `sink`, in steps small enough that it stops
 * soon after yielding more than `limit` bytes (at most 256 × 1032 bytes more, where Python's zlib
 * stops at exactly `limit` + 1). Returns the bytes produced and whether the stream ended; input
 * after the end of the stream is not read. Throws an Error for data that are not deflate.
 */
export function inflateBounded(
  compressed: Uint8Array,
  limit: number,
  sink: (part: Uint8Array) => void,
): { produced: number; ended: boolean } {
  let produced = 0;
  const inflater = new Inflate((part) => {
    produced += part.length;
    if (part.length) sink(part);
  });
  // fflate 0.8.2 (pinned in package.json) keeps its state in `s`: `f` is set once the final
  // block has begun and `l` cleared when a block ends, so both mean the stream has ended.
  const state = (inflater as unknown as { s: { f?: number; l?: unknown } }).s;
  const ended = () => Boolean(state.f) && !state.l;
  for (let at = 0; at < compressed.length && produced <= limit && !ended(); ) {
    const room = Math.floor((limit + 1 - produced) / MAX_INFLATION);
    const step = Math.min(Math.max(room, PUSH_BYTES[0]), PUSH_BYTES[1]);
    inflater.push(compressed.subarray(at, at + step), false);
    at += step;
  }
  return { produced, ended: ended() };
}

let crcTable: Uint32Array | null = null;

/** CRC-32 (ISO-HDLC, zlib.crc32). */
export function crc32(bytes: Uint8Array): number {
  if (crcTable === null) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = crcTable[(crc ^ bytes[i]!) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
