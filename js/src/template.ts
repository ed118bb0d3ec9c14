/**
 * The encrypted template format UVT2 and the template store (sdk/uvsdk/template.py), byte for
 * byte the Python SDK's. File layout (integers big-endian):
 *
 * ```
 * magic   "UVT2"                                                      4 bytes
 * kdf     1 = scrypt(passphrase), 2 = random key from a platform keystore   1 byte
 * log2_n, r, p   scrypt parameters (zero for a platform key)             3 bytes
 * salt    random per file (platform key: the key's id)                  16 bytes
 * check   HMAC-SHA256(key, "uvsdk key check")[:16]                      16 bytes
 * digest  SHA-256(all of the above)[:8]                                  8 bytes
 * nonce   random per write                                              12 bytes
 * sealed  AES-256-GCM(key, nonce, JSON payload, aad = the 60 bytes above) rest
 * ```
 *
 * Version 1 files (`UVT1`, no digest, 52-byte header) are read too and rewritten as version 2.
 * Every write stores `generation` = last known + 1 and records it outside the file
 * ({@link TemplateStore.setGeneration}, keyed by the salt); a template below its record is
 * refused as rolled back.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { hmac } from "@noble/hashes/hmac.js";
import { scryptAsync } from "@noble/hashes/scrypt.js";
import {
  KeyUnavailableError,
  NotEnrolledError,
  RollbackError,
  TemplateError,
  UvsdkError,
  WrongKeyError,
} from "./errors.js";
import { ab, b64decodeLenient, b64encode, concat, equalBytes, hex, packBits, randomBytes, unpackBits, webCrypto } from "./bytes.js";
import { canonicalJson, isObject, parseJson, type JsonObject, type JsonValue } from "./json.js";
import { quote, shown } from "./text.js";
import { BackoffPolicy, backoffState, type BackoffState } from "./backoff.js";

export const MAGIC = "UVT2";
export const MAGIC_V1 = "UVT1";
export const SUFFIX = ".uvt";
export const KDF_SCRYPT = 1;
export const KDF_KEYRING = 2;
export const SCRYPT_LOG2_N = 15;
export const SCRYPT_R = 8;
export const SCRYPT_P = 1;
export const SCRYPT_LOG2_N_RANGE = [10, 16] as const;
const HEADER_SIZE = 4 + 4 + 16 + 16 + 8 + 12; // ">4sBBBB16s16s8s12s": 60
const HEADER_V1_SIZE = 4 + 4 + 16 + 16 + 12; // ">4sBBBB16s16s12s": 52
const DIGEST_BYTES = 8;
const KEY_CHECK_LABEL = new TextEncoder().encode("uvsdk key check");
export const USER_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const MAX_FILE_BYTES = 16 * 1024 * 1024;

type Awaitable<T> = T | Promise<T>;

/**
 * Where templates and their generation records live. Implementations: {@link MemoryStore}
 * (here), FileStore (node.ts), IndexedDBStore (browser.ts).
 */
export interface TemplateStore {
  /** The user's template file, or null when there is none. */
  read(user: string): Awaitable<Uint8Array | null>;
  /** Replace the user's template atomically; with `mustExist`, fail (NotEnrolledError) if it was deleted. */
  write(user: string, bytes: Uint8Array, options?: { mustExist?: boolean }): Awaitable<void>;
  /** Remove the user's template; whether there was one. */
  remove(user: string): Awaitable<boolean>;
  /** The generation recorded for a template key id (hex of the salt), or null. */
  getGeneration(keyIdHex: string): Awaitable<number | null>;
  /** Record a template's generation. */
  setGeneration(keyIdHex: string, generation: number): Awaitable<void>;
  /** Forget a generation record (when its template is deleted). */
  removeGeneration?(keyIdHex: string): Awaitable<void>;
  /**
   * Take the user's lock across processes or tabs (spec §10.1, §12) for a read-modify-write;
   * resolves to the function that releases it. `create` makes the store first (enrollment).
   * A store without it is serialised within this process only.
   */
  lock?(user: string, options?: { create?: boolean }): Promise<() => Promise<void>>;
}

/** A {@link TemplateStore} in memory (tests; apps that persist the bytes themselves). */
export class MemoryStore implements TemplateStore {
  readonly templates = new Map<string, Uint8Array>();
  readonly generations = new Map<string, number>();
  read(user: string): Uint8Array | null {
    const bytes = this.templates.get(user);
    return bytes ? bytes.slice() : null;
  }
  write(user: string, bytes: Uint8Array, options: { mustExist?: boolean } = {}): void {
    if (options.mustExist && !this.templates.has(user)) {
      throw new NotEnrolledError(`${user}${SUFFIX} was deleted meanwhile: not written again`);
    }
    this.templates.set(user, bytes.slice());
  }
  remove(user: string): boolean {
    return this.templates.delete(user);
  }
  getGeneration(keyIdHex: string): number | null {
    return this.generations.get(keyIdHex) ?? null;
  }
  setGeneration(keyIdHex: string, generation: number): void {
    this.generations.set(keyIdHex, generation);
  }
  removeGeneration(keyIdHex: string): void {
    this.generations.delete(keyIdHex);
  }
}

/** A user's secrets and enrollment state (template.Template; only ever in clear in memory). */
export interface Template {
  user: string;
  created: number;
  /** The codeword bits (0/1), or null. */
  codeword: Uint8Array | null;
  userId: number | bigint | null;
  codeSha256: string | null;
  mode: string | null;
  prototype: Float32Array | null;
  threshold: number | null;
  targetTpr: number | null;
  far: number | null;
  calibration: string | null;
  /** The bundle's score scale (its cohort and score_norm, spec §3.9) the prototype scores are on (null: raw cosines, or codeword mode). */
  cohort: string | null;
  modelSha256: string | null;
  enrolled: number | null;
  samples: number;
  policy: BackoffPolicy;
  backoff: BackoffState;
  generation: number;
}

/** A new template with nothing but its user and creation time. */
export function newTemplate(user: string, created: number): Template {
  return {
    user,
    created,
    codeword: null,
    userId: null,
    codeSha256: null,
    mode: null,
    prototype: null,
    threshold: null,
    targetTpr: null,
    far: null,
    calibration: null,
    cohort: null,
    modelSha256: null,
    enrolled: null,
    samples: 0,
    policy: new BackoffPolicy(),
    backoff: { failures: 0, lockedUntil: 0 },
    generation: 0,
  };
}

/** Whether enrollment has been done (Template.is_enrolled). */
export function isEnrolled(template: Template): boolean {
  return template.mode !== null && template.threshold !== null;
}

/**
 * `Template.to_payload`: the JSON plaintext, written as RFC 8785 canonical JSON (keys sorted, no
 * whitespace, numbers as `JSON.stringify` writes them), byte for byte what the Python SDK writes
 * (spec §10.5). Readers accept any spelling; this one makes the bytes the same in both cores.
 */
export function toPayload(t: Template): Uint8Array {
  let prototype: string | null = null;
  if (t.prototype !== null) {
    const bytes = new Uint8Array(t.prototype.length * 4);
    const view = new DataView(bytes.buffer);
    t.prototype.forEach((x, i) => view.setFloat32(i * 4, x, true));
    prototype = b64encode(bytes);
  }
  const data = {
    version: PAYLOAD_VERSION,
    generation: t.generation,
    user: t.user,
    created: t.created,
    codeword: t.codeword !== null ? b64encode(packBits(t.codeword)) : null,
    codeword_length: t.codeword !== null ? t.codeword.length : null,
    user_id: t.userId,
    code_sha256: t.codeSha256,
    mode: t.mode,
    prototype,
    threshold: t.threshold,
    target_tpr: t.targetTpr,
    far: t.far,
    calibration: t.calibration,
    cohort: t.cohort,
    model_sha256: t.modelSha256,
    enrolled: t.enrolled,
    samples: t.samples,
    policy: {
      attempts: t.policy.attempts,
      base_seconds: t.policy.baseSeconds,
      factor: t.policy.factor,
      max_seconds: t.policy.maxSeconds,
    },
    backoff: { failures: t.backoff.failures, locked_until: t.backoff.lockedUntil },
  };
  return new TextEncoder().encode(canonicalJson(data));
}

/** The payload `version` written; 1 to 3 are read. */
export const PAYLOAD_VERSION = 3;

/** Why a payload is malformed: a short phrase naming the member, never its value (a secret). */
class Malformed extends Error {}
const malformed = (why: string): never => {
  throw new Malformed(why);
};

/** A member that must be present. */
function member(data: JsonObject, key: string): JsonValue {
  if (!(key in data)) return malformed(`no ${key}`);
  return data[key]!;
}

/** A JSON integer (written without a fraction, within the parser's 2^53 limit) at least `low`. */
function integer(value: JsonValue | undefined, key: string, low = 0): number {
  if (!(typeof value === "bigint" && value >= BigInt(low))) return malformed(`${key} is not an integer of at least ${low}`);
  return Number(value);
}

function numberOrNull(value: JsonValue, key: string): number | null {
  if (value === null) return null;
  if (typeof value === "bigint" || typeof value === "number") return Number(value);
  return malformed(`${key} is not a number`);
}

function stringOrNull(value: JsonValue, key: string): string | null {
  if (value === null || typeof value === "string") return value;
  return malformed(`${key} is not a string`);
}

/** Base64 bytes (decoded leniently, spec §10.6), or null. */
function bytesOrNull(value: JsonValue, key: string): Uint8Array | null {
  if (value === null) return null;
  if (typeof value !== "string") return malformed(`${key} is not a string`);
  try {
    return b64decodeLenient(value);
  } catch {
    return malformed(`${key} is not base64`);
  }
}

/** Version 3's `cohort`: null or a SHA-256 (64 characters). */
function cohortOf(value: JsonValue): string | null {
  if (value === null) return null;
  if (typeof value !== "string" || [...value].length !== 64) return malformed("cohort is not a SHA-256");
  return value;
}

/** An object of known members whose values are numbers, missing ones taking the defaults. */
function numbers(value: JsonValue, key: string, defaults: Record<string, bigint | number>): Record<string, bigint | number> {
  if (!isObject(value)) return malformed(`${key} is not an object`);
  const out = { ...defaults };
  for (const [name, x] of Object.entries(value)) {
    if (!(name in defaults)) return malformed(`${key} has an unknown member`);
    if (typeof x !== "bigint" && typeof x !== "number") return malformed(`${key}.${name} is not a number`);
    out[name] = x;
  }
  return out;
}

/**
 * `Template.from_payload`: parse a decrypted payload of version 1, 2 or 3 (spec §10.5), in any
 * spelling. Anything malformed is a TemplateError (`template.malformed`) saying which member.
 */
export function fromPayload(payload: Uint8Array): Template {
  try {
    let data: JsonValue;
    try {
      data = parseJson(new TextDecoder("utf-8", { fatal: true }).decode(payload));
    } catch {
      return malformed("not JSON text");
    }
    if (!isObject(data)) return malformed("not a JSON object");
    const version = integer(member(data, "version"), "version", 1);
    if (version > PAYLOAD_VERSION) malformed(`version ${version} is unknown`);
    const generation = version >= 2 ? integer(member(data, "generation"), "generation") : 0;
    const packed = bytesOrNull(member(data, "codeword"), "codeword");
    const codeword = packed === null ? null : unpackBits(packed, integer(member(data, "codeword_length"), "codeword_length"));
    const raw = bytesOrNull(member(data, "prototype"), "prototype");
    if (raw !== null && raw.length % 4 !== 0) malformed("prototype is not float32 values");
    const view = raw === null ? null : new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const prototype = view === null ? null : Float32Array.from({ length: view.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true));
    const user = member(data, "user");
    if (typeof user !== "string") return malformed("user is not a string");
    const created = numberOrNull(member(data, "created"), "created");
    if (created === null) return malformed("created is not a number");
    const rawId = member(data, "user_id");
    const userId = rawId === null ? null : integer(rawId, "user_id", -Number.MAX_SAFE_INTEGER);
    const policy = numbers(member(data, "policy"), "policy", { attempts: 5n, base_seconds: 30, factor: 2, max_seconds: 86400 });
    const state = numbers(member(data, "backoff"), "backoff", { failures: 0n, locked_until: 0 });
    const template: Template = {
      user,
      created,
      codeword,
      userId,
      codeSha256: stringOrNull(member(data, "code_sha256"), "code_sha256"),
      mode: stringOrNull(member(data, "mode"), "mode"),
      prototype,
      threshold: numberOrNull(member(data, "threshold"), "threshold"),
      targetTpr: numberOrNull(member(data, "target_tpr"), "target_tpr"),
      // absent before calibrated thresholds (warm-up alone)
      far: "far" in data ? numberOrNull(data["far"]!, "far") : null,
      calibration: "calibration" in data ? stringOrNull(data["calibration"]!, "calibration") : null,
      cohort: version >= 3 ? cohortOf(member(data, "cohort")) : null,
      modelSha256: stringOrNull(member(data, "model_sha256"), "model_sha256"),
      enrolled: numberOrNull(member(data, "enrolled"), "enrolled"),
      samples: integer(member(data, "samples"), "samples"),
      policy: new BackoffPolicy(
        integer(policy["attempts"], "policy.attempts"), Number(policy["base_seconds"]), Number(policy["factor"]), Number(policy["max_seconds"]),
      ),
      backoff: backoffState(integer(state["failures"], "backoff.failures"), Number(state["locked_until"])),
      generation,
    };
    return template;
  } catch (error) {
    const why = error instanceof Malformed ? error.message : error instanceof RangeError ? "policy or backoff out of range" : "unreadable";
    throw new TemplateError(`the template's content is malformed: ${why}`, "template.malformed");
  }
}

/** The parsed header of a template file (template._Header). */
export interface Header {
  version: 1 | 2;
  kdf: number;
  log2N: number;
  r: number;
  p: number;
  salt: Uint8Array;
  check: Uint8Array;
  nonce: Uint8Array;
}

function headerFields(h: Header): Uint8Array {
  const out = new Uint8Array(40);
  out.set(new TextEncoder().encode(h.version === 2 ? MAGIC : MAGIC_V1), 0);
  out.set([h.kdf, h.log2N, h.r, h.p], 4);
  out.set(h.salt, 8);
  out.set(h.check, 24);
  return out;
}

/** The unkeyed digest of the header's fields: SHA-256(magic..check)[:8]. */
export function headerDigest(h: Header): Uint8Array {
  return sha256(headerFields(h)).slice(0, DIGEST_BYTES);
}

/** The packed header: the GCM associated data (60 bytes; 52 for version 1). */
export function packHeader(h: Header): Uint8Array {
  return h.version === 1 ? concat(headerFields(h), h.nonce) : concat(headerFields(h), headerDigest(h), h.nonce);
}

/**
 * `parse_file`: split a template file into header and sealed payload, checking without any key,
 * in this order: magic (or too short), length, header digest, key parameters.
 */
export function parseFile(blob: Uint8Array, name = "template"): { header: Header; sealed: Uint8Array } {
  const magic = String.fromCharCode(...blob.subarray(0, 4));
  let version: 1 | 2;
  if (magic === MAGIC && blob.length >= 4) version = 2;
  else if (magic === MAGIC_V1 && blob.length >= 4) version = 1;
  else if (blob.length < 4 + 16) throw new TemplateError(`${name}: not a uvsdk template (too short: ${blob.length} bytes)`, "template.not-a-template");
  else throw new TemplateError(`${name}: not a uvsdk template (bad magic)`, "template.not-a-template");
  const size = version === 2 ? HEADER_SIZE : HEADER_V1_SIZE;
  if (blob.length < size + 16) throw new TemplateError(`${name}: not a uvsdk template (too short: ${blob.length} bytes)`, "template.not-a-template");
  const header: Header = {
    version,
    kdf: blob[4]!,
    log2N: blob[5]!,
    r: blob[6]!,
    p: blob[7]!,
    salt: blob.slice(8, 24),
    check: blob.slice(24, 40),
    nonce: version === 2 ? blob.slice(48, 60) : blob.slice(40, 52),
  };
  if (version === 2 && !equalBytes(headerDigest(header), blob.subarray(40, 48))) {
    throw new TemplateError(`${name}: the template's header was modified or is damaged`, "template.header-modified");
  }
  if (header.kdf === KDF_SCRYPT) {
    const [low, high] = SCRYPT_LOG2_N_RANGE;
    if (!(low <= header.log2N && header.log2N <= high && header.r === SCRYPT_R && header.p === SCRYPT_P)) {
      throw new TemplateError(`${name}: the template's key parameters are not ones this SDK writes (modified?)`, "template.key-parameters");
    }
  } else if (header.kdf === KDF_KEYRING) {
    if (header.log2N !== 0 || header.r !== 0 || header.p !== 0) {
      throw new TemplateError(`${name}: the template's key parameters are malformed (modified?)`, "template.key-parameters");
    }
  } else {
    throw new TemplateError(`${name}: unknown key derivation ${header.kdf} (modified?)`, "template.key-parameters");
  }
  return { header, sealed: blob.slice(size) };
}

/** HMAC-SHA256(key, "uvsdk key check")[:16]. */
export function keyCheck(key: Uint8Array): Uint8Array {
  return hmac(sha256, key, KEY_CHECK_LABEL).slice(0, 16);
}

/**
 * `passphrase_bytes`: the bytes scrypt derives from, NFKC-normalised UTF-8 (version 2). Text that
 * is not well-formed Unicode (a lone surrogate) is refused without echoing any of it.
 */
export function passphraseBytes(passphrase: string, normalize = true): Uint8Array {
  if (/\p{Surrogate}/u.test(passphrase)) {
    throw new KeyUnavailableError("the passphrase is not valid UTF-8 text; type it again or fix UVSDK_PASSPHRASE");
  }
  return new TextEncoder().encode(normalize ? passphrase.normalize("NFKC") : passphrase);
}

/** scrypt (N = 2^log2N, r, p, 32 bytes) with @noble/hashes. */
export async function deriveKey(secret: Uint8Array, salt: Uint8Array, log2N: number, r: number, p: number): Promise<Uint8Array> {
  return scryptAsync(secret, salt, { N: 2 ** log2N, r, p, dkLen: 32, maxmem: 2 ** 31 });
}

async function aesKey(key: Uint8Array): Promise<CryptoKey> {
  return webCrypto().subtle.importKey("raw", ab(key), { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
}

/** AES-256-GCM seal (ciphertext ‖ 16-byte tag). */
export async function seal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, aad: Uint8Array): Promise<Uint8Array> {
  const out = await webCrypto().subtle.encrypt(
    { name: "AES-GCM", iv: ab(nonce), additionalData: ab(aad), tagLength: 128 },
    await aesKey(key),
    ab(plaintext),
  );
  return new Uint8Array(out);
}

/** AES-256-GCM open; null when the tag does not verify. */
export async function open(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, aad: Uint8Array): Promise<Uint8Array | null> {
  try {
    const out = await webCrypto().subtle.decrypt(
      { name: "AES-GCM", iv: ab(nonce), additionalData: ab(aad), tagLength: 128 },
      await aesKey(key),
      ab(sealed),
    );
    return new Uint8Array(out);
  } catch {
    return null;
  }
}

/** A passphrase, or a function asked for it (`confirm`: a template is being created). */
export type PassphraseSource = string | ((confirm: boolean) => string | Promise<string>);

/** A random 256-bit key kept by the platform (kdf 2): its 16-byte id (the file's salt) and the key. */
export interface PlatformKey {
  id: Uint8Array;
  key: Uint8Array;
}

/** Options of {@link Templates}. */
export interface TemplatesOptions {
  /** Opens and creates passphrase (scrypt) templates. */
  passphrase?: PassphraseSource;
  /** When given, new templates are sealed with this key (kdf 2) instead of a passphrase. */
  platformKey?: PlatformKey;
  /** scrypt cost of new templates, log2 N in [10, 16] (default 15). */
  scryptLog2N?: number;
}

/** `store.path(user)`'s name check: 1-64 letters, digits, '.', '_' or '-'. */
export function checkUser(user: unknown): string {
  if (typeof user !== "string" || !USER_NAME.test(user)) {
    throw new UvsdkError(`invalid user name ${shown(user, 80)}: use 1-64 letters, digits, '.', '_' or '-'`, "store.user-name");
  }
  return user;
}

/**
 * The template store's logic (template.TemplateStore): opens, seals and writes templates over a
 * {@link TemplateStore}, derives keys once, tracks generations and refuses rolled-back files.
 */
export class Templates {
  readonly store: TemplateStore;
  private readonly passphraseSource: PassphraseSource | undefined;
  private passphrase: string | null = null;
  private readonly platformKey: PlatformKey | undefined;
  private readonly scryptLog2N: number;
  private readonly keys = new Map<string, { header: Header; key: Uint8Array }>();
  private readonly generations = new Map<string, number>();
  private readonly derived = new Map<string, Uint8Array>();

  constructor(store: TemplateStore, options: TemplatesOptions = {}) {
    this.store = store;
    this.passphraseSource = options.passphrase;
    this.platformKey = options.platformKey;
    const [low, high] = SCRYPT_LOG2_N_RANGE;
    const log2N = options.scryptLog2N ?? SCRYPT_LOG2_N;
    if (!(Number.isInteger(log2N) && low <= log2N && log2N <= high)) {
      throw new UvsdkError(`scrypt_log2_n must be in [${low}, ${high}], not ${log2N}`, "argument.invalid");
    }
    if (options.platformKey && (options.platformKey.id.length !== 16 || options.platformKey.key.length !== 32)) {
      throw new UvsdkError("a platform key needs a 16-byte id and a 32-byte key", "argument.invalid");
    }
    this.scryptLog2N = log2N;
  }

  /** Whether the user has a template. */
  async exists(user: string): Promise<boolean> {
    return (await this.store.read(checkUser(user))) !== null;
  }

  private async getPassphrase(confirm: boolean): Promise<string> {
    if (this.passphrase === null) {
      const source = this.passphraseSource;
      if (source === undefined) throw new KeyUnavailableError("no passphrase: pass one (or a function asking for it)");
      const value = typeof source === "string" ? source : await source(confirm);
      if (!value) throw new KeyUnavailableError("the passphrase is empty");
      passphraseBytes(value); // refuses text that is not valid Unicode
      this.passphrase = value;
    }
    return this.passphrase;
  }

  private async openKey(header: Header, name: string): Promise<Uint8Array> {
    const cacheKey = [header.version, header.kdf, hex(header.salt), header.log2N, header.r, header.p].join(":");
    const cached = this.derived.get(cacheKey);
    if (cached && equalBytes(keyCheck(cached), header.check)) return cached;
    let candidates: Uint8Array[];
    if (header.kdf === KDF_KEYRING) {
      if (!this.platformKey || !equalBytes(this.platformKey.id, header.salt)) {
        throw new WrongKeyError(`${name}: its key is not in this keyring`, "template.wrong-key");
      }
      candidates = [this.platformKey.key];
    } else {
      const passphrase = await this.getPassphrase(false);
      let secrets = [passphraseBytes(passphrase)];
      if (header.version === 1) {
        // Version 1 derived from the passphrase as given; NFKC is tried second.
        const raw = passphraseBytes(passphrase, false);
        secrets = [raw, ...secrets.filter((s) => !equalBytes(s, raw))];
      }
      candidates = [];
      for (const secret of secrets) candidates.push(await deriveKey(secret, header.salt, header.log2N, header.r, header.p));
    }
    for (const key of candidates) {
      if (equalBytes(keyCheck(key), header.check)) {
        this.derived.set(cacheKey, key);
        return key;
      }
    }
    if (header.kdf === KDF_KEYRING) throw new WrongKeyError(`${name}: wrong keyring key`, "template.wrong-key");
    if (typeof this.passphraseSource !== "string") this.passphrase = null; // ask again next time
    const hint = header.version === 2 ? "" : " (or its header was modified)";
    throw new WrongKeyError(`${name}: wrong passphrase${hint}`);
  }

  private async newKey(): Promise<{ header: Header; key: Uint8Array }> {
    const empty = new Uint8Array(0);
    if (this.platformKey) {
      const { id, key } = this.platformKey;
      return { header: { version: 2, kdf: KDF_KEYRING, log2N: 0, r: 0, p: 0, salt: id.slice(), check: keyCheck(key), nonce: empty }, key };
    }
    const salt = randomBytes(16);
    const passphrase = await this.getPassphrase(true);
    const key = await deriveKey(passphraseBytes(passphrase), salt, this.scryptLog2N, SCRYPT_R, SCRYPT_P);
    return {
      header: { version: 2, kdf: KDF_SCRYPT, log2N: this.scryptLog2N, r: SCRYPT_R, p: SCRYPT_P, salt, check: keyCheck(key), nonce: empty },
      key,
    };
  }

  /**
   * `load`: decrypt and authenticate the user's template and check it was not rolled back.
   * Errors in the Python's order: not enrolled, too large, the header checks of
   * {@link parseFile}, wrong passphrase/key, modified (GCM tag), malformed payload, another
   * user's template, rolled back.
   */
  async load(user: string): Promise<Template> {
    checkUser(user);
    const name = `${user}${SUFFIX}`;
    const blob = await this.store.read(user);
    if (blob === null) throw new NotEnrolledError(`user ${quote(user)} is not enrolled in this store (run uvsdk enroll)`);
    if (blob.length > MAX_FILE_BYTES) throw new TemplateError(`${name}: too large to be a template`, "template.not-a-template");
    const { header, sealed } = parseFile(blob, name);
    const key = await this.openKey(header, name);
    const payload = await open(key, header.nonce, sealed, packHeader(header));
    if (payload === null) throw new TemplateError(`${name}: the template was modified or is damaged`);
    const template = fromPayload(payload);
    if (template.user !== user) throw new TemplateError(`${name}: the template belongs to another user (renamed file?)`, "template.wrong-user");
    const recorded = await this.store.getGeneration(hex(header.salt));
    if (recorded !== null && template.generation < recorded) {
      throw new RollbackError(
        `${name}: the template is older than the last one written on this device ` +
          `(generation ${template.generation} < ${recorded}): it was rolled back or ` +
          `restored from a copy. Nothing was changed; if you restored it yourself, ` +
          `re-enroll (uvsdk delete --user ${user}, then uvsdk enroll)`,
      );
    }
    this.keys.set(user, { header, key });
    this.generations.set(user, Math.max(template.generation, recorded ?? 0));
    return template;
  }

  /**
   * `save`: seal with a fresh nonce and the next generation, write atomically, then record the
   * generation. `create` (default: this object has not read the user's template) allows a new
   * file; an update never recreates a template deleted meanwhile. Returns the generation.
   */
  async save(template: Template, options: { create?: boolean } = {}): Promise<number> {
    const user = checkUser(template.user);
    const known = this.keys.get(user);
    const create = options.create ?? known === undefined;
    const { header: base, key } = known ?? (await this.newKey());
    const header: Header = { ...base, version: 2, nonce: randomBytes(12) };
    const generation = Math.max(template.generation, this.generations.get(user) ?? 0) + 1;
    const aad = packHeader(header);
    const sealed = await seal(key, header.nonce, toPayload({ ...template, generation }), aad);
    await this.store.write(user, concat(aad, sealed), { mustExist: !create });
    this.keys.set(user, { header, key });
    this.generations.set(user, generation);
    try {
      await this.store.setGeneration(hex(header.salt), generation);
    } catch (error) {
      throw new UvsdkError(`${user}${SUFFIX} was written, but its freshness record was not (${(error as Error).message})`, "template.freshness");
    }
    return generation;
  }

  /** `delete`: remove the user's template and its generation record. */
  async delete(user: string): Promise<void> {
    checkUser(user);
    const blob = await this.store.read(user);
    if (blob === null) throw new NotEnrolledError(`user ${quote(user)} has no template in this store`);
    let header: Header | null = null;
    try {
      header = parseFile(blob, `${user}${SUFFIX}`).header; // a damaged file is still deleted
    } catch {
      header = null;
    }
    await this.store.remove(user);
    if (header !== null && this.store.removeGeneration) {
      try {
        await this.store.removeGeneration(hex(header.salt));
      } catch {
        // as the Python: a record that cannot be removed does not undo the deletion
      }
    }
    this.keys.delete(user);
    this.generations.delete(user);
  }
}
