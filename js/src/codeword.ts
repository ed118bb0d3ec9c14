/**
 * FedUV codewords on the device, from the generator matrix shipped in the bundle
 * (sdk/uvsdk/codeword.py). A user's message is `m = b ‖ r`: `b` the user id as `id_bits` bits
 * (most significant first), `r` random bits; the codeword is `c = m·G mod 2`, its ±1 form
 * `v = 1 − 2c`.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { BundleError, UvsdkError } from "./errors.js";
import { b64decodeStrict, b64encode, concat, hex, packBits, unpackBits, webCrypto } from "./bytes.js";

/** A binary k × n matrix, row-major, one 0/1 byte per entry. */
export interface BitMatrix {
  k: number;
  n: number;
  bits: Uint8Array;
}

/** `pack_generator`: base64 of numpy.packbits(G, axis=None). */
export function packGenerator(g: BitMatrix): string {
  return b64encode(packBits(g.bits));
}



/** Rank of a binary matrix over GF(2) (Gaussian elimination on bit-packed rows). */
export function rankGF2(g: BitMatrix): number {
  const words = Math.ceil(g.n / 32);
  const rows: Uint32Array[] = [];
  for (let r = 0; r < g.k; r++) {
    const row = new Uint32Array(words);
    for (let c = 0; c < g.n; c++) if (g.bits[r * g.n + c]) row[c >> 5]! |= 1 << (c & 31);
    rows.push(row);
  }
  let rank = 0;
  for (let c = 0; c < g.n && rank < rows.length; c++) {
    const w = c >> 5;
    const mask = 1 << (c & 31);
    let pivot = -1;
    for (let r = rank; r < rows.length; r++) {
      if (rows[r]![w]! & mask) {
        pivot = r;
        break;
      }
    }
    if (pivot < 0) continue;
    [rows[rank], rows[pivot]] = [rows[pivot]!, rows[rank]!];
    const p = rows[rank]!;
    for (let r = 0; r < rows.length; r++) {
      if (r !== rank && rows[r]![w]! & mask) {
        const row = rows[r]!;
        for (let i = 0; i < words; i++) row[i]! ^= p[i]!;
      }
    }
    rank++;
  }
  return rank;
}

/**
 * `unpack_generator`: the k × n generator from its base64 packed bits. Refuses invalid base64,
 * the wrong number of bits, and a matrix not of rank k over GF(2), where the code lives (spec:
 * a MUST; the Python SDK's `gf2_rank`). A matrix can be full rank over the reals and not over
 * GF(2); the converse cannot happen.
 */
export function unpackGenerator(encoded: string, k: number, n: number): BitMatrix {
  let packed: Uint8Array;
  try {
    packed = b64decodeStrict(encoded);
  } catch (error) {
    throw new BundleError(`the code's generator is not valid base64 (${(error as Error).message})`);
  }
  if (packed.length !== Math.floor((k * n + 7) / 8)) {
    throw new BundleError(
      `the code's generator holds ${packed.length * 8} bits, a ${k} × ${n} matrix needs ${k * n}`,
    );
  }
  const g = { k, n, bits: unpackBits(packed, k * n) };
  if (rankGF2(g) < k) throw new BundleError("the code's generator matrix is not of full rank over GF(2)");
  return g;
}

/** `code_fingerprint`: hex SHA-256 of `"{k}x{n}:"` and the packed generator bits. */
export function codeFingerprint(g: BitMatrix): string {
  const label = new TextEncoder().encode(`${g.k}x${g.n}:`);
  return hex(sha256(concat(label, packBits(g.bits))));
}

/** `user_id_bits`: the user id as `idBits` bits, most significant first. */
export function userIdBits(userId: number | bigint, idBits: number): Uint8Array {
  const id = BigInt(userId);
  if (id < 0n || id >= 1n << BigInt(idBits)) {
    throw new UvsdkError(`user id ${id} is out of range: it must be in [0, 2^${idBits})`, "codeword.user-id");
  }
  const out = new Uint8Array(idBits);
  for (let i = 0; i < idBits; i++) out[i] = Number((id >> BigInt(idBits - 1 - i)) & 1n);
  return out;
}

/** `random_user_id`: `idBits` random bits as a number (bigint above 2^53). */
export function randomUserId(idBits: number): bigint {
  return randomBits(idBits);
}

/** `secrets.randbits(count)` from crypto.getRandomValues. */
export function randomBits(count: number): bigint {
  const bytes = new Uint8Array(Math.ceil(count / 8));
  webCrypto().getRandomValues(bytes);
  let value = 0n;
  for (const b of bytes) value = (value << 8n) | BigInt(b);
  return value & ((1n << BigInt(count)) - 1n);
}

/**
 * `new_message`: the id bits followed by `k − idBits` random bits. The random tail is taken
 * least significant bit first from `randomBits` (as the Python does from secrets.randbits);
 * leave it out to draw it from crypto.getRandomValues (tests pass it to reproduce a vector).
 */
export function newMessage(
  userId: number | bigint,
  idBits: number,
  k: number,
  random?: number | bigint,
): Uint8Array {
  if (!(0 < idBits && idBits < k)) {
    throw new UvsdkError(`the code has ${k} message bits, too few for ${idBits} id bits`, "argument.invalid");
  }
  const tailBits = k - idBits;
  const r = random === undefined ? randomBits(tailBits) : BigInt(random);
  const message = new Uint8Array(k);
  message.set(userIdBits(userId, idBits));
  for (let i = 0; i < tailBits; i++) message[idBits + i] = Number((r >> BigInt(i)) & 1n);
  return message;
}

/** `encode`: codeword bits `c = m·G mod 2` (length n). */
export function encode(message: ArrayLike<number>, g: BitMatrix): Uint8Array {
  if (message.length !== g.k) {
    throw new RangeError(`message of length ${message.length} for a ${g.k} × ${g.n} generator`);
  }
  const out = new Uint8Array(g.n);
  for (let r = 0; r < g.k; r++) {
    if (!message[r]) continue;
    const base = r * g.n;
    for (let c = 0; c < g.n; c++) out[c]! ^= g.bits[base + c]! & 1;
  }
  return out;
}

/** `bipolar`: the ±1 vector `v = 1 − 2c` (float32). */
export function bipolar(bits: ArrayLike<number>): Float32Array {
  return Float32Array.from({ length: bits.length }, (_, i) => 1 - 2 * bits[i]!);
}
