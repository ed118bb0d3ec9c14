/** Small byte helpers shared by the core (platform-neutral). Internal. */

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const LOOKUP = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) LOOKUP[ALPHABET.charCodeAt(i)] = i;

/** Standard base64 with padding. */
export function b64encode(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i]!;
    const b = i + 1 < bytes.length ? bytes[i + 1]! : 0;
    const c = i + 2 < bytes.length ? bytes[i + 2]! : 0;
    out += ALPHABET[a >> 2]! + ALPHABET[((a & 3) << 4) | (b >> 4)]!;
    out += i + 1 < bytes.length ? ALPHABET[((b & 15) << 2) | (c >> 6)]! : "=";
    out += i + 2 < bytes.length ? ALPHABET[c & 63]! : "=";
  }
  return out;
}

/** Decode groups of base64 characters (no padding validation here). */
function decodeQuads(chars: string, padding: number): Uint8Array {
  const bits: number[] = [];
  let acc = 0;
  let count = 0;
  for (const ch of chars) {
    acc = (acc << 6) | LOOKUP[ch.charCodeAt(0)]!;
    count += 6;
    if (count >= 8) {
      count -= 8;
      bits.push((acc >> count) & 0xff);
    }
  }
  void padding;
  return Uint8Array.from(bits);
}

/**
 * `base64.b64decode(text, validate=True)` (Python >= 3.11, strict mode): only the alphabet,
 * correct padding, nothing after it. Throws an Error on anything else.
 */
export function b64decodeStrict(text: string): Uint8Array {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) {
    throw new Error(/[^A-Za-z0-9+/=]/.test(text) ? "Only base64 data is allowed" : "Incorrect padding");
  }
  return decodeQuads(text.replace(/=+$/, ""), 0);
}

/**
 * `base64.b64decode(text)` (non-validating): characters outside the alphabet are discarded,
 * then the padding must work out ("Incorrect padding" otherwise); data after padding ends it.
 */
export function b64decodeLenient(text: string): Uint8Array {
  if (/[^\x00-\x7f]/.test(text)) throw new Error("string argument should contain only ASCII characters");
  let chars = "";
  let pads = 0;
  for (const ch of text) {
    if (ch === "=") {
      if (chars.length % 4 >= 2 && chars.length % 4 + pads < 4) {
        pads++;
        if ((chars.length % 4) + pads === 4) break;
      }
      continue;
    }
    if (LOOKUP[ch.charCodeAt(0)]! >= 0) {
      if (pads > 0) break;
      chars += ch;
    }
  }
  const rest = chars.length % 4;
  if (rest === 1) throw new Error("Invalid base64-encoded string");
  if (rest !== 0 && rest + pads < 4) throw new Error("Incorrect padding");
  return decodeQuads(chars, pads);
}

/** Lowercase hex. */
export function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** Bytes of a hex string (even length, hex digits only). */
export function fromHex(text: string): Uint8Array {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(text)) throw new Error("not hex");
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Concatenation. */
export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Constant-time equality of two byte strings (hmac.compare_digest). */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** A copy backed by a plain ArrayBuffer (what WebCrypto's BufferSource wants). */
export function ab(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(bytes.length);
  out.set(bytes);
  return out;
}

/** The WebCrypto implementation (globalThis.crypto: browsers, Node >= 19). */
export function webCrypto(): Crypto {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (!c || !c.subtle) throw new Error("WebCrypto (globalThis.crypto.subtle) is not available");
  return c;
}

/** `secrets.token_bytes(n)`. */
export function randomBytes(n: number): Uint8Array {
  const out = new Uint8Array(n);
  webCrypto().getRandomValues(out);
  return out;
}

/** `numpy.packbits(bits)` (big-endian bit order, zero-padded to whole bytes). */
export function packBits(bits: ArrayLike<number>): Uint8Array {
  const out = new Uint8Array(Math.ceil(bits.length / 8));
  for (let i = 0; i < bits.length; i++) if (bits[i]) out[i >> 3]! |= 0x80 >> (i & 7);
  return out;
}

/**
 * `numpy.unpackbits(packed, count=count)`: the first `count` bits, zero-padded when `count`
 * exceeds the bits available; a negative `count` drops that many bits from the end.
 */
export function unpackBits(packed: Uint8Array, count = packed.length * 8): Uint8Array {
  const available = packed.length * 8;
  const n = count >= 0 ? count : Math.max(0, available + count);
  const out = new Uint8Array(n);
  for (let i = 0; i < Math.min(n, available); i++) out[i] = (packed[i >> 3]! >> (7 - (i & 7))) & 1;
  return out;
}
