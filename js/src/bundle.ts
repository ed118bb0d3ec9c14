/**
 * Model bundles (`.uvb`): manifest schema, integrity and signatures (sdk/uvsdk/bundle.py).
 *
 * A bundle is a zip archive holding `model.onnx`, `manifest.json` and optionally
 * `signature.ed25519` (Ed25519 over the exact bytes of `manifest.json`), and `cohort.f32` (the
 * AS-norm cohort, cohort.ts) exactly when the manifest has a `cohort`, and `model.ort` (checked, not
 * run) only when the manifest's `ort` names it. Members are read bounded (archive.ts). The manifest names the
 * SHA-256 of the model and of the cohort, so a signature over the manifest covers them too. The ONNX Runtime
 * session is not opened here (see verifier.ts): this module has no runtime dependency.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { BundleError, SignatureError } from "./errors.js";
import { readZipMembers } from "./archive.js";
import { ab, hex, webCrypto } from "./bytes.js";
import { canonicalJson, isInt, isNumber, isObject, parseJson, toPlain, type JsonObject, type JsonValue } from "./json.js";
import { num, quote, shown } from "./text.js";
import { roundHalfEven, type Vector } from "./scoring.js";
import { parseCalibration, type Calibration, type PrototypeScore } from "./calibration.js";
import {
  CENTRE_FILE,
  COHORT_FILE,
  Centre,
  Cohort,
  MAX_CENTRE_BYTES,
  MAX_COHORT_BYTES,
  parseCohortSpec,
  parseScoreNorm,
  scoreNormToDict,
  type CohortSpec,
  type ScoreNorm,
} from "./cohort.js";
import { codeFingerprint, unpackGenerator, type BitMatrix } from "./codeword.js";
import { parseTraining, type Training } from "./training.js";

export const FORMAT = "uvsdk-bundle/1";
export const METHODS = ["feduv", "fedhide", "fedaws", "softmax", "fedface", "fedgn", "fedcs", "reference"];
export const MODEL_FILE = "model.onnx";
export const ORT_FILE = "model.ort";
export const MANIFEST_FILE = "manifest.json";
export const SIGNATURE_FILE = "signature.ed25519";
export const MAX_MEMBER_BYTES = 512 * 1024 * 1024;
export const MAX_MANIFEST_BYTES = 1024 * 1024;
export const MAX_SIGNATURE_BYTES = 1024;
const MEMBER_LIMITS: Record<string, number> = {
  [MODEL_FILE]: MAX_MEMBER_BYTES,
  [ORT_FILE]: MAX_MEMBER_BYTES,
  [MANIFEST_FILE]: MAX_MANIFEST_BYTES,
  [SIGNATURE_FILE]: MAX_SIGNATURE_BYTES,
  [COHORT_FILE]: MAX_COHORT_BYTES,
  [CENTRE_FILE]: MAX_CENTRE_BYTES,
};
export const WINDOW_SECONDS_RANGE = [0.1, 30.0] as const;
export const MIN_HOP_SECONDS = 0.05;
export const MAX_WINDOW_SAMPLES = 1 << 20;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/**
 * What an audio model's front end hears (`input.band`, spec §3.4): `wide`, each clip as
 * recorded (a manifest without `band`), or `narrow`, nothing above 4 kHz, so that telephone and
 * wideband recordings of one voice score alike. The graph does the band-limiting.
 */
export const BANDS = ["wide", "narrow"] as const;
export type Band = (typeof BANDS)[number];

/** Raw mono audio in [-1, 1] at `sampleRate`, cut into windows (seconds). */
export interface AudioInput {
  kind: "audio";
  sampleRate: number;
  windowSeconds: number;
  hopSeconds: number;
  minSeconds: number;
  band: Band;
}

/** Raw uint8 pixels, height × width × channels. */
export interface ImageInput {
  kind: "image";
  height: number;
  width: number;
  channels: number;
}

/** A binary linear code: n, k, minimum distance, id bits and generator G (k × n). */
export interface Code {
  family: string;
  n: number;
  k: number;
  dMin: number;
  idBits: number;
  generator: BitMatrix;
  /** SHA-256 naming this code (codeword.code_fingerprint); a codeword is bound to it. */
  fingerprint: string;
}

/** The validated content of `manifest.json` (bundle.Manifest). */
export interface Manifest {
  name: string;
  method: string;
  modality: "audio" | "image";
  input: AudioInput | ImageInput;
  outputKind: "codeword" | "embedding";
  dim: number;
  modelSha256: string;
  code: Code | null;
  calibration: Calibration | null;
  /** The manifest's `cohort` (null: none; prototype scores are raw cosines). */
  cohort: CohortSpec | null;
  /** The manifest's `score_norm`: how prototype scores are normalised against the cohort, and the recording chain's mean taken out first (null: neither). */
  scoreNorm: ScoreNorm | null;
  /** How the model was trained and the default enrollment mode (null: not stated). */
  training: Training | null;
  /** The keys the SDK does not read (provenance, metrics, ...), as plain JSON. */
  extra: Record<string, unknown>;
}

/** A loaded, checked bundle. */
export interface Bundle {
  /** What messages call the bundle (a file name). */
  name: string;
  manifest: Manifest;
  /** The exact bytes of manifest.json. */
  manifestBytes: Uint8Array;
  modelBytes: Uint8Array;
  signature: Uint8Array | null;
  /** The cohort under its score_norm (cohort.f32, checked against the manifest), or null. */
  cohort: Cohort | null;
  /** The recording chain's mean (centre.f32, checked against `score_norm.centre`), or null. */
  centre: Centre | null;
  /** First 16 hex digits of the SHA-256 of the raw public key that verified it, or null. */
  signedBy: string | null;
}

type Kind = "int" | "float" | "str" | "dict";
const KIND_WORDS: Record<Kind, string> = { int: "an integer", float: "a number", str: "a string", dict: "an object" };

function get(data: JsonObject, key: string, kind: Kind, prefix = ""): any {
  let value: JsonValue | undefined = data[key];
  if (kind === "float" && isInt(value)) value = Number(value);
  const ok =
    (kind === "int" && isInt(value)) ||
    (kind === "float" && typeof value === "number") ||
    (kind === "str" && typeof value === "string") ||
    (kind === "dict" && isObject(value));
  if (!ok) throw new BundleError(`manifest: ${prefix}${key} must be ${KIND_WORDS[kind]}, not ${shown(value)}`);
  if (kind === "float" && !Number.isFinite(value as number)) {
    throw new BundleError(`manifest: ${prefix}${key} must be finite`);
  }
  return kind === "int" ? Number(value as bigint) : value;
}

function audioInput(spec: JsonObject): AudioInput {
  const input: AudioInput = {
    kind: "audio",
    sampleRate: get(spec, "sample_rate", "int", "input."),
    windowSeconds: get(spec, "window_seconds", "float", "input."),
    hopSeconds: get(spec, "hop_seconds", "float", "input."),
    minSeconds: get(spec, "min_seconds", "float", "input."),
    band: "band" in spec ? get(spec, "band", "str", "input.") : "wide",
  };
  if (!(BANDS as readonly string[]).includes(input.band)) {
    throw new BundleError(`manifest: input.band ${shown(input.band)} is not one of ${BANDS.join(", ")}`);
  }
  if (!(1000 <= input.sampleRate && input.sampleRate <= 384_000)) {
    throw new BundleError(`manifest: input.sample_rate ${input.sampleRate} is not plausible`);
  }
  const [low, high] = WINDOW_SECONDS_RANGE;
  if (!(low <= input.windowSeconds && input.windowSeconds <= high)) {
    throw new BundleError(
      `manifest: input.window_seconds ${num(input.windowSeconds)} is outside [${num(low)}, ${num(high)}]`,
    );
  }
  if (!(MIN_HOP_SECONDS <= input.hopSeconds && input.hopSeconds <= input.windowSeconds)) {
    throw new BundleError(
      `manifest: input.hop_seconds ${num(input.hopSeconds)} is outside [${num(MIN_HOP_SECONDS)}, window_seconds]`,
    );
  }
  if (!(0 < input.minSeconds && input.minSeconds <= input.windowSeconds)) {
    throw new BundleError("manifest: input needs 0 < min_seconds <= window_seconds");
  }
  if (roundHalfEven(input.windowSeconds * input.sampleRate) > MAX_WINDOW_SAMPLES) {
    throw new BundleError(
      `manifest: a window of ${num(input.windowSeconds)} s at ${input.sampleRate} Hz is ` +
        `more than ${MAX_WINDOW_SAMPLES} samples`,
    );
  }
  return input;
}

function imageInput(spec: JsonObject): ImageInput {
  const input: ImageInput = {
    kind: "image",
    height: get(spec, "height", "int", "input."),
    width: get(spec, "width", "int", "input."),
    channels: get(spec, "channels", "int", "input."),
  };
  if (
    !(0 < input.height && input.height <= 4096 && 0 < input.width && input.width <= 4096 && [1, 3, 4].includes(input.channels))
  ) {
    throw new BundleError("manifest: image input needs 0 < height, width <= 4096, channels 1/3/4");
  }
  return input;
}

/** `_parse_code`: the code of a codeword bundle (null for an embedding bundle). */
function parseCode(spec: JsonValue | undefined, kind: string, dim: number): Code | null {
  if (kind !== "codeword") {
    if (spec !== undefined && spec !== null) {
      throw new BundleError("manifest: 'code' is present but output.kind is not 'codeword'");
    }
    return null;
  }
  if (!isObject(spec)) throw new BundleError("manifest: a codeword bundle needs a 'code' object");
  const n: number = get(spec, "n", "int", "code.");
  const k: number = get(spec, "k", "int", "code.");
  const idBits: number = get(spec, "id_bits", "int", "code.");
  const dMin: number = get(spec, "d_min", "int", "code.");
  if (n !== dim || !(0 < k && k <= n) || !(0 < idBits && idBits < k) || !(0 < dMin && dMin <= n)) {
    throw new BundleError("manifest: code needs n = output.dim, 0 < id_bits < k <= n, 0 < d_min <= n");
  }
  const generator = unpackGenerator(get(spec, "generator", "str", "code."), k, n);
  const family: string = get(spec, "family", "str", "code.");
  return { family, n, k, dMin, idBits, generator, fingerprint: codeFingerprint(generator) };
}

/** `_check_ort`: the optional `ort` object, `model.ort` and its SHA-256 (other keys are facts). */
function checkOrt(spec: JsonValue | undefined): void {
  if (spec === undefined || spec === null) return;
  if (!isObject(spec)) throw new BundleError("manifest: ort must be an object");
  if (spec["file"] !== ORT_FILE) throw new BundleError(`manifest: ort.file must be ${quote(ORT_FILE)}`);
  if (!SHA256_HEX.test(get(spec, "sha256", "str", "ort."))) {
    throw new BundleError("manifest: ort.sha256 is not 64 lowercase hex digits");
  }
}

/** `Bundle.__init__`'s check of model.ort: present only with the manifest's `ort`, and its SHA-256. */
async function checkOrtMember(manifest: Manifest, data: Uint8Array | undefined, name: string): Promise<void> {
  if (data === undefined) return;
  const spec = manifest.extra["ort"] as { sha256: string } | null | undefined;
  const digest = hex(new Uint8Array(await webCrypto().subtle.digest("SHA-256", ab(data))));
  if (spec === undefined || spec === null) {
    throw new BundleError(`${name}: model.ort is not named in the manifest (no ort key)`, "bundle.member-unexpected");
  }
  if (digest !== spec.sha256) {
    throw new BundleError(
      `${name}: model.ort does not match the manifest's ort.sha256 (the bundle was modified or damaged)`,
      "bundle.digest-mismatch",
    );
  }
}

const KNOWN = new Set(["format", "name", "method", "modality", "input", "output", "code", "model_sha256", "calibration", "cohort", "score_norm", "training"]);

/**
 * `Manifest.from_dict`: validate a parsed manifest (from {@link parseJson}); every problem is a
 * BundleError naming the key, checked in the Python's order.
 */
export function parseManifest(data: JsonValue): Manifest {
  if (!isObject(data)) throw new BundleError("manifest: not a JSON object");
  const fmt = data["format"];
  if (fmt !== FORMAT) {
    throw new BundleError(`unknown bundle format ${shown(fmt, 1000)}: this SDK reads ${quote(FORMAT)}`, "bundle.unsupported");
  }
  const name: string = get(data, "name", "str");
  const method: string = get(data, "method", "str");
  if (!METHODS.includes(method)) {
    throw new BundleError(`manifest: unknown method ${quote(method)} (one of ${METHODS.join(", ")})`);
  }
  const modality: string = get(data, "modality", "str");
  const spec: JsonObject = get(data, "input", "dict");
  let input: AudioInput | ImageInput;
  if (modality === "audio") input = audioInput(spec);
  else if (modality === "image") input = imageInput(spec);
  else throw new BundleError(`manifest: unknown modality ${quote(modality)} (audio or image)`);
  const output: JsonObject = get(data, "output", "dict");
  const kind: string = get(output, "kind", "str", "output.");
  const dim: number = get(output, "dim", "int", "output.");
  if (!(kind === "codeword" || kind === "embedding") || !(0 < dim && dim <= 65536)) {
    throw new BundleError("manifest: output needs kind codeword|embedding and 0 < dim <= 65536");
  }
  const sha: string = get(data, "model_sha256", "str");
  if (!SHA256_HEX.test(sha)) throw new BundleError("manifest: model_sha256 is not 64 lowercase hex digits");
  const code = parseCode(data["code"], kind, dim);
  checkOrt(data["ort"]);
  let cohort: CohortSpec | null = null;
  if (data["cohort"] !== undefined && data["cohort"] !== null) cohort = parseCohortSpec(data["cohort"]);
  let scoreNorm: ScoreNorm | null = null;
  if (data["score_norm"] !== undefined && data["score_norm"] !== null) scoreNorm = parseScoreNorm(data["score_norm"], cohort);
  else if (cohort !== null) throw new BundleError("manifest: a cohort needs score_norm (as-norm or s-norm)");
  let calibration: Calibration | null = null;
  if (data["calibration"] !== undefined && data["calibration"] !== null) {
    calibration = parseCalibration(data["calibration"], kind, prototypeScore(scoreNorm));
  }
  let training: Training | null = null;
  if (data["training"] !== undefined && data["training"] !== null) training = parseTraining(data["training"], kind);
  const extra: Record<string, unknown> = {};
  for (const key of Object.keys(data)) if (!KNOWN.has(key)) extra[key] = toPlain(data[key]);
  return {
    name,
    method,
    modality: modality as "audio" | "image",
    input,
    outputKind: kind as "codeword" | "embedding",
    dim,
    modelSha256: sha,
    code,
    calibration,
    cohort,
    scoreNorm,
    training,
    extra,
  };
}

/** What a manifest's prototype-mode scores are: its `score_norm` method, else "cosine". */
export function prototypeScore(scoreNorm: ScoreNorm | null): PrototypeScore {
  return scoreNorm === null ? "cosine" : scoreNorm.method;
}

/**
 * `Manifest.score_scale`: the scale prototype scores (and a user's threshold) are on: null for
 * raw cosines, else the hex SHA-256 of the RFC 8785 form of `{cohort: <cohort.sha256>,
 * score_norm: <score_norm>}` (`cohort` absent without one: a centre alone; spec §3.9). A
 * template records it.
 */
export function scoreScale(manifest: Manifest): string | null {
  if (manifest.scoreNorm === null) return null;
  const scale: Record<string, unknown> = { score_norm: scoreNormToDict(manifest.scoreNorm) };
  if (manifest.cohort !== null) scale["cohort"] = manifest.cohort.sha256;
  return hex(sha256(new TextEncoder().encode(canonicalJson(scale))));
}

/** `Bundle._load_centre`: centre.f32 checked against the manifest's `score_norm.centre`, both or neither. */
function loadCentre(manifest: Manifest, data: Uint8Array | undefined, name: string): Centre | null {
  const spec = manifest.scoreNorm?.centre ?? null;
  if (spec === null && data === undefined) return null;
  if (spec === null) {
    throw new BundleError(`${name}: centre.f32 is not named in the manifest (no score_norm.centre)`, "bundle.member-unexpected");
  }
  if (data === undefined) throw new BundleError(`${name}: the manifest names a centre and there is no ${CENTRE_FILE}`, "bundle.member-missing");
  return Centre.fromMember(data, spec, manifest.dim, name);
}

/** `Bundle.centred`: prototype-mode vectors as the bundle scores them (its chain's mean out, spec §6.8), or unchanged. */
export function centred(bundle: Bundle, vector: Vector): Vector {
  return bundle.centre === null ? vector : bundle.centre.apply(vector);
}

/** `Bundle._load_cohort`: cohort.f32 checked against the manifest's `cohort`, both or neither. */
function loadCohort(manifest: Manifest, data: Uint8Array | undefined, name: string): Cohort | null {
  const spec = manifest.cohort;
  if (spec === null && data === undefined) return null;
  if (spec === null) throw new BundleError(`${name}: cohort.f32 is not named in the manifest (no cohort key)`, "bundle.member-unexpected");
  if (data === undefined) throw new BundleError(`${name}: the manifest names a cohort and there is no ${COHORT_FILE}`, "bundle.member-missing");
  return Cohort.fromMember(data, spec, manifest.scoreNorm!, manifest.dim, name);
}

/** `_read_members`: the bundle's files from the zip archive, bounded (archive.ts). */
function readMembers(bytes: Uint8Array, name: string): Record<string, Uint8Array> {
  return readZipMembers(bytes, MEMBER_LIMITS, name);
}

/** Options of {@link loadBundle}. */
export interface LoadBundleOptions {
  /**
   * Raw 32-byte Ed25519 public keys. When given (non-empty), the bundle must carry a signature
   * made by one of them.
   */
  trustedKeys?: Uint8Array[];
  /** What messages call the bundle (default "bundle.uvb"). */
  name?: string;
}

/** Whether this WebCrypto verifies Ed25519 signature `signature` of `message` with `key`. */
async function ed25519Verify(key: Uint8Array, signature: Uint8Array, message: Uint8Array): Promise<boolean> {
  const subtle = webCrypto().subtle;
  let publicKey: CryptoKey;
  try {
    publicKey = await subtle.importKey("raw", ab(key), { name: "Ed25519" }, false, ["verify"]);
  } catch (error) {
    throw new SignatureError(
      `cannot use trusted key ${hex(sha256(key)).slice(0, 16)} (${(error as Error).message}): a trusted key is 32 raw bytes`, "bundle.trusted-key",
    );
  }
  try {
    return await subtle.verify({ name: "Ed25519" }, publicKey, ab(signature), ab(message));
  } catch {
    return false;
  }
}

/**
 * Load and check a `.uvb` bundle (bundle.Bundle.__init__): unzip (refusing members over their
 * limits), require model.onnx and manifest.json, parse and validate the manifest, check the
 * model's SHA-256, the cohort (cohort.f32 against the manifest's `cohort`), the centre (centre.f32 against `score_norm.centre`), and with trusted keys the Ed25519 signature of the exact manifest bytes.
 */
export async function loadBundle(bytes: Uint8Array, options: LoadBundleOptions = {}): Promise<Bundle> {
  const name = options.name ?? "bundle.uvb";
  const members = readMembers(bytes, name);
  for (const member of [MANIFEST_FILE, MODEL_FILE]) {
    if (!(member in members)) throw new BundleError(`${name}: the bundle has no ${member}`, "bundle.member-missing");
  }
  const manifestBytes = members[MANIFEST_FILE]!;
  let data: JsonValue;
  try {
    const text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(manifestBytes);
    data = parseJson(text);
  } catch (error) {
    throw new BundleError(`${name}: manifest.json is not valid JSON (${(error as Error).message})`);
  }
  const manifest = parseManifest(data);
  const modelBytes = members[MODEL_FILE]!;
  const digest = hex(new Uint8Array(await webCrypto().subtle.digest("SHA-256", ab(modelBytes))));
  if (digest !== manifest.modelSha256) {
    throw new BundleError(
      `${name}: model.onnx does not match the manifest's model_sha256 (the bundle was modified or damaged)`, "bundle.digest-mismatch",
    );
  }
  await checkOrtMember(manifest, members[ORT_FILE], name);
  const cohort = loadCohort(manifest, members[COHORT_FILE], name);
  const centre = loadCentre(manifest, members[CENTRE_FILE], name);
  const signature = members[SIGNATURE_FILE] ?? null;
  let signedBy: string | null = null;
  const keys = options.trustedKeys ?? [];
  if (keys.length) {
    if (signature === null) throw new SignatureError(`${name}: the bundle is not signed, and trusted keys are set`);
    for (const key of keys) {
      if (await ed25519Verify(key, signature, manifestBytes)) {
        signedBy = hex(sha256(key)).slice(0, 16);
        break;
      }
    }
    if (signedBy === null) throw new SignatureError(`${name}: the signature does not verify with any trusted key`);
  }
  return { name, manifest, manifestBytes, modelBytes, signature, cohort, centre, signedBy };
}

/** A raw 32-byte Ed25519 public key from a PEM SubjectPublicKeyInfo (`.pub.pem`) text. */
export function ed25519KeyFromPem(pem: string): Uint8Array {
  const body = pem.replace(/-----(BEGIN|END) PUBLIC KEY-----/g, "").replace(/\s+/g, "");
  const der = Uint8Array.from(atob(body), (c) => c.charCodeAt(0));
  // SEQUENCE { SEQUENCE { OID 1.3.101.112 } BIT STRING { 0x00, key } }: 12-byte prefix
  const prefix = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
  if (der.length !== 44 || prefix.some((b, i) => der[i] !== b)) {
    throw new SignatureError("the trusted key is not an Ed25519 public key (PEM SubjectPublicKeyInfo)", "bundle.trusted-key");
  }
  return der.slice(12);
}
