/**
 * The SDK's API (sdk/uvsdk/verifier.py): a {@link Verifier} holds one bundle and one template
 * store, enrolls users and verifies them. The ONNX Runtime module is injected
 * (`onnxruntime-node` or `onnxruntime-web`: both export `InferenceSession` and `Tensor`); this
 * core never imports a runtime itself.
 */
import type { InferenceSession, Tensor } from "onnxruntime-common";
import * as backoffRules from "./backoff.js";
import { BackoffPolicy } from "./backoff.js";
import { centred, scoreScale, type Bundle, type AudioInput, type Code, type Manifest } from "./bundle.js";
import {
  DEFAULT_FAR,
  checkFar,
  expected,
  heldOutRowFor,
  rowFor,
  userThreshold,
  type Calibration,
  type HeldOut,
  type HeldOutRow,
  type Mode,
  type Row,
} from "./calibration.js";
import { bipolar, encode, newMessage, randomUserId } from "./codeword.js";
import { normalisedLeaveOneOut, type Centre, type Cohort } from "./cohort.js";
import {
  AttemptNotRecordedError,
  BundleError,
  EnrollmentError,
  MediaError,
  ModelMismatchError,
  NotEnrolledError,
  UvsdkError,
  type MediaReason,
} from "./errors.js";
import { checkAudio, repeatPad, trimSilence, windowStarts } from "./media.js";
import { quote, shown } from "./text.js";
import { codewordScore, cosine, leaveOneOutScores, prototype, warmupThreshold } from "./scoring.js";
import {
  checkUser,
  isEnrolled,
  newTemplate,
  Templates,
  type PassphraseSource,
  type PlatformKey,
  type Template,
  type TemplateStore,
} from "./template.js";

export const MIN_ENROLLMENT_SAMPLES = 5;
export const DEFAULT_TARGET_TPR = 0.95;
/** Windows per model call: bounds memory for long clips. */
export const WINDOW_BATCH = 16;
/** The enrollment modes a caller may ask for (docs/spec.md §9.1 step 5). */
export const REQUESTED_MODES = ["auto", "prototype", "codeword"] as const;
export type RequestedMode = (typeof REQUESTED_MODES)[number];

/**
 * `check_mode`: refuse, before any work, a mode that is unknown or that the bundle cannot give
 * (an EnrollmentError: `codeword` on an embedding bundle).
 */
export function checkMode(requested: string, manifest: Pick<Manifest, "code">): void {
  if (!(REQUESTED_MODES as readonly string[]).includes(requested)) {
    throw new EnrollmentError(`the enrollment mode must be auto, prototype or codeword, not ${shown(requested)}`, "enroll.mode");
  }
  if (requested === "codeword" && manifest.code === null) {
    throw new EnrollmentError("codeword mode needs a codeword bundle, and this bundle outputs embeddings", "enroll.mode");
  }
}

/**
 * `enrollment_mode`: the mode enrollment uses (docs/spec.md §9.1 step 5). `auto`: codeword mode
 * iff the user holds a codeword, the bundle is a codeword bundle and its `training.enrollment`
 * is not `prototype` (a DP-trained FedUV bundle enrolls by prototype); `prototype`: always
 * prototype mode; `codeword`: codeword mode, an EnrollmentError when the user holds no codeword
 * or the bundle outputs embeddings.
 */
export function enrollmentMode(requested: string, manifest: Pick<Manifest, "code" | "training">, holdsCodeword: boolean): Mode {
  checkMode(requested, manifest);
  if (requested === "codeword") {
    if (!holdsCodeword) {
      throw new EnrollmentError(
        "codeword mode needs the user's codeword, and this user holds none: make one " +
          "with uvsdk codeword new, or enroll in prototype mode", "enroll.mode",
      );
    }
    return "codeword";
  }
  const byPrototype = manifest.training !== null && manifest.training.enrollment === "prototype";
  return requested === "auto" && holdsCodeword && manifest.code !== null && !byPrototype ? "codeword" : "prototype";
}

/** The part of an ONNX Runtime module the core uses (onnxruntime-node / onnxruntime-web). */
export interface OrtModule {
  InferenceSession: { create(model: Uint8Array, options?: InferenceSession.SessionOptions): Promise<InferenceSession> };
  Tensor: new (type: "float32" | "uint8", data: Float32Array | Uint8Array, dims: readonly number[]) => Tensor;
}

/** An input: mono float32 audio at the bundle's rate, or uint8 H×W×C pixels at its size. */
export type Sample = Float32Array | Uint8Array;

/** Per-sample feedback ({@link Verifier.checkSample}, enrollment reports). */
export interface SampleReport {
  ok: boolean;
  reason?: MediaReason;
  message: string;
  /** Seconds of audio used (after trimming; a clip shorter than a window counts as one window). */
  seconds?: number;
  windows?: number;
}

/** The outcome of {@link Verifier.enroll} (verifier.EnrollmentReport): it holds no secret. */
export interface EnrollmentReport {
  user: string;
  mode: Mode;
  targetTpr: number;
  samples: SampleReport[];
  used: number;
  far: number | null;
  expectedFar: string | null;
  expectedFrr: string | null;
  floored: boolean;
  ownRejected: number;
  advice: string | null;
  /** What the user's threshold (a calibrated row's) did on recording chains it was not fitted on, when measured. */
  heldOut: HeldOutRow | null;
  /** How many chains the held-out figures cover, and the clip length their FRR counts (null without them). */
  heldOutChains: number | null;
  heldOutSeconds: number | null;
}

/** One verification: the score, the user's threshold and whether `score >= threshold`. */
export interface Decision {
  score: number;
  threshold: number;
  accepted: boolean;
}

/** Options of {@link Verifier.create}. */
export interface VerifierOptions {
  ort: OrtModule;
  bundle: Bundle;
  store: TemplateStore;
  passphrase?: PassphraseSource;
  /** Seal new templates with a platform key (kdf 2) instead of a passphrase. */
  platformKey?: PlatformKey;
  /** scrypt cost of new templates (log2 N, 10..16, default 15). */
  scryptLog2N?: number;
  /** FAR that enrollment calibrates thresholds at (default 0.01); null: the warm-up rule alone. */
  far?: number | null;
  /** Lock-out policy written into templates at enrollment. */
  backoff?: BackoffPolicy;
  /** Unix time in seconds (default Date.now() / 1000). */
  clock?: () => number;
  /** ONNX Runtime session options (e.g. executionProviders for onnxruntime-web). */
  sessionOptions?: InferenceSession.SessionOptions;
}

/** What enrollment computes from the vectors ({@link computeEnrollment}); secret: never shown. */
export interface EnrollmentResult {
  mode: Mode;
  /** The prototype (float32), prototype mode only. */
  prototype: Float32Array | null;
  /** Warm-up scores: leave-one-out cosines, normalised by the score_norm with a cohort (prototype), or codeword scores. */
  scores: Float64Array;
  warmupThreshold: number;
  threshold: number;
  /** The calibration row behind the threshold, or null (warm-up rule alone). */
  row: Row | null;
  /** Whether the row's threshold is above the warm-up threshold (informative, spec §4.3). */
  floored: boolean;
  ownRejected: number;
}

/**
 * The arithmetic of `Verifier.enroll` once the samples are embedded: codeword mode when a
 * codeword is given, prototype mode otherwise (the vectors centred by `centre` when given, spec
 * §6.8; leave-one-out scores AS-norm normalised against `cohort` when given); the user's threshold at `targetTpr` and `far` (spec §4.3, calibration.ts
 * userThreshold). Fewer than five vectors is an EnrollmentError.
 */
export function computeEnrollment(
  vectors: ArrayLike<number>[],
  options: {
    codeword?: Uint8Array | null;
    targetTpr?: number;
    calibration?: Calibration | null;
    far?: number | null;
    cohort?: Cohort | null;
    centre?: Centre | null;
    of?: number;
  },
): EnrollmentResult {
  if (vectors.length < MIN_ENROLLMENT_SAMPLES) {
    throw new EnrollmentError(
      `only ${vectors.length} usable sample(s) of ${options.of ?? vectors.length}: at least ` +
        `${MIN_ENROLLMENT_SAMPLES} are needed; nothing was enrolled`,
    );
  }
  const targetTpr = options.targetTpr ?? DEFAULT_TARGET_TPR;
  let mode: Mode;
  let reference: Float32Array | null = null;
  let scores: Float64Array;
  if (options.codeword) {
    mode = "codeword";
    const v = bipolar(options.codeword);
    scores = Float64Array.from(vectors, (z) => codewordScore(v, z));
  } else {
    mode = "prototype";
    const centre = options.centre ?? null;
    const rows = centre === null ? vectors : vectors.map((z) => centre.apply(z));
    reference = Float32Array.from(prototype(rows));
    scores = options.cohort ? normalisedLeaveOneOut(rows, options.cohort) : leaveOneOutScores(rows);
  }
  const warm = warmupThreshold(scores, targetTpr);
  const { threshold, row } = userThreshold(scores, targetTpr, options.calibration ?? null, mode, options.far ?? null);
  return {
    mode,
    prototype: reference,
    scores,
    warmupThreshold: warm,
    threshold,
    row,
    floored: row !== null && row.threshold > warm,
    ownRejected: scores.filter((s) => s < threshold).length,
  };
}

/** Re-record advice needs a binomial tail below this (calibration.ADVICE_P). */
export const ADVICE_P = 0.05;

/**
 * `binomial_tail`: P(X >= atLeast) for X ~ Binomial(trials, rate), summed in log space with
 * log-factorials as running sums of log i (the reference's terms).
 */
export function binomialTail(trials: number, atLeast: number, rate: number): number {
  if (atLeast <= 0) return 1;
  if (atLeast > trials || rate <= 0) return 0;
  if (rate >= 1) return 1;
  const logFactorial = [0];
  for (let i = 1; i <= trials; i++) logFactorial.push(logFactorial[i - 1]! + Math.log(i));
  let total = 0;
  for (let k = atLeast; k <= trials; k++) {
    const logChoose = logFactorial[trials]! - logFactorial[k]! - logFactorial[trials - k]!;
    total += Math.exp(logChoose + k * Math.log(rate) + (trials - k) * Math.log1p(-rate));
  }
  return Math.min(total, 1);
}

/**
 * Whether enrollment advises re-recording (spec §9.1): the threshold is calibrated (`row` not
 * null), more of the user's own warm-up scores fall below it than `max(⌊n(1 − q)⌋, 1)`, and,
 * when the row states an FRR, that many are unlikely at that FRR (binomial tail below ADVICE_P).
 */
export function rerecordAdvised(ownRejected: number, samples: number, targetTpr: number, row: Row | null): boolean {
  if (row === null) return false;
  const allowed = Math.max(Math.floor(samples * (1 - targetTpr) + 1e-9), 1);
  if (ownRejected <= allowed) return false;
  return row.frr === null || binomialTail(samples, ownRejected, row.frr) < ADVICE_P;
}

/** Enroll and verify users with one model bundle and one template store. */
export class Verifier {
  readonly bundle: Bundle;
  readonly templates: Templates;
  readonly far: number | null;
  readonly backoffPolicy: BackoffPolicy;
  readonly clock: () => number;
  private readonly ort: OrtModule;
  private readonly sessionOptions: InferenceSession.SessionOptions | undefined;
  private session: Promise<InferenceSession> | null = null;
  private readonly locks = new Map<string, Promise<unknown>>();

  private constructor(options: VerifierOptions) {
    this.far = options.far === undefined ? DEFAULT_FAR : options.far === null ? null : checkFar(options.far);
    this.ort = options.ort;
    this.bundle = options.bundle;
    this.templates = new Templates(options.store, {
      passphrase: options.passphrase,
      platformKey: options.platformKey,
      scryptLog2N: options.scryptLog2N,
    });
    this.backoffPolicy = options.backoff ?? new BackoffPolicy();
    this.clock = options.clock ?? (() => Date.now() / 1000);
    this.sessionOptions = options.sessionOptions;
  }

  /** A verifier (the model session is opened on first use, as the Python's). */
  static async create(options: VerifierOptions): Promise<Verifier> {
    return new Verifier(options);
  }

  /**
   * Run `task` with the user's lock held for a read-modify-write of a template: in this process
   * (a promise chain per user), and across processes or tabs where the store has a lock
   * (FileStore: the lock file Python takes too; IndexedDBStore: Web Locks). `create` makes the
   * store first (enrollment, codeword creation), so writers racing to create it are serialised.
   */
  private async locked<T>(user: string, task: () => Promise<T>, options: { create?: boolean } = {}): Promise<T> {
    const held = () => this.heldAcrossProcesses(user, task, options.create ?? false);
    const before = this.locks.get(user) ?? Promise.resolve();
    const run = before.then(held, held);
    const tail = run.catch(() => undefined);
    this.locks.set(user, tail);
    try {
      return await run;
    } finally {
      if (this.locks.get(user) === tail) this.locks.delete(user);
    }
  }

  private async heldAcrossProcesses<T>(user: string, task: () => Promise<T>, create: boolean): Promise<T> {
    const store = this.templates.store;
    const release = store.lock ? await store.lock(user, { create }) : null;
    try {
      return await task();
    } finally {
      await release?.();
    }
  }

  // -- the model ---------------------------------------------------------------------------

  /** `Bundle._open_session`: the session, checked against the input/output contract. */
  private async openSession(): Promise<InferenceSession> {
    const name = this.bundle.name;
    let session: InferenceSession;
    try {
      session = await this.ort.InferenceSession.create(this.bundle.modelBytes, this.sessionOptions);
    } catch (error) {
      const message = String((error as Error)?.message ?? error).split("\n")[0]!.slice(0, 200);
      throw new BundleError(`${name}: model.onnx does not load (${message})`, "bundle.model");
    }
    if (session.inputNames.length !== 1 || session.inputNames[0] !== "input" || !session.outputNames.includes("output")) {
      throw new BundleError(`${name}: the model needs one input 'input' and an 'output'`, "bundle.model");
    }
    const audio = this.bundle.manifest.modality === "audio";
    const meta = (session as unknown as { inputMetadata?: Array<{ isTensor?: boolean; type?: string; shape?: unknown[] }> })
      .inputMetadata?.[0];
    if (meta && meta.isTensor !== undefined) {
      const type = meta.isTensor ? meta.type : "not a tensor";
      const rank = meta.shape ? meta.shape.length : -1;
      const want = audio ? ["float32", 2] : ["uint8", 4];
      if (type !== want[0] || rank !== want[1]) {
        const pyType = type === "float32" ? "tensor(float)" : type === "uint8" ? "tensor(uint8)" : `tensor(${type})`;
        const expected = audio ? "('tensor(float)', 2)" : "('tensor(uint8)', 4)";
        throw new BundleError(
          `${name}: the model's input is ${pyType} of rank ${rank}, the ${this.bundle.manifest.modality} contract is ${expected}`, "bundle.model",
        );
      }
    }
    return session;
  }

  private getSession(): Promise<InferenceSession> {
    if (this.session === null) {
      this.session = this.openSession();
      this.session.catch(() => {
        this.session = null;
      });
    }
    return this.session;
  }

  /** `Bundle.run`: model outputs for a batch, checked to be `[batch, dim]` and finite. */
  private async run(batch: Float32Array | Uint8Array, dims: number[]): Promise<Float32Array> {
    const session = await this.getSession();
    const name = this.bundle.name;
    const dim = this.bundle.manifest.dim;
    let output: Tensor;
    try {
      const input =
        batch instanceof Float32Array ? new this.ort.Tensor("float32", batch, dims) : new this.ort.Tensor("uint8", batch, dims);
      const result = await session.run({ input }, ["output"]);
      output = result["output"]!;
    } catch (error) {
      const message = String((error as Error)?.message ?? error).split("\n")[0]!.slice(0, 200);
      throw new BundleError(`${name}: the model failed to run (${message})`, "bundle.model");
    }
    if (output.dims.length !== 2 || output.dims[0] !== dims[0] || output.dims[1] !== dim) {
      throw new BundleError(
        `${name}: the model returned shape (${output.dims.join(", ")}), the manifest promises [${dims[0]}, ${dim}]`, "bundle.model",
      );
    }
    const data = output.data;
    if (!(data instanceof Float32Array)) throw new BundleError(`${name}: the model's output is not float32`, "bundle.model");
    for (let i = 0; i < data.length; i++) {
      if (!Number.isFinite(data[i]!)) throw new BundleError(`${name}: the model returned non-finite values`, "bundle.model");
    }
    return data;
  }

  // -- embeddings --------------------------------------------------------------------------

  /** Checks and trimming of one audio input; the trimmed clip and its window layout. */
  private prepareAudio(samples: Float32Array, allowClipped: boolean, name: string) {
    const spec = this.bundle.manifest.input as AudioInput;
    try {
      checkAudio(samples, spec.sampleRate, { minSeconds: spec.minSeconds, name });
    } catch (error) {
      if (!(allowClipped && error instanceof MediaError && error.reason === "clipped")) throw error;
    }
    let clip = trimSilence(samples, spec.sampleRate, { minSeconds: spec.minSeconds });
    const { width, starts } = windowStarts(clip.length, spec.sampleRate, spec.windowSeconds, spec.hopSeconds);
    if (clip.length < width) clip = repeatPad(clip, width);
    return { clip, width, starts, seconds: clip.length / spec.sampleRate };
  }

  private async embedWith(source: Sample, allowClipped: boolean, name = "input"): Promise<{ vector: Float32Array; seconds?: number; windows: number }> {
    const manifest = this.bundle.manifest;
    if (manifest.input.kind === "audio") {
      if (!(source instanceof Float32Array)) throw new MediaError(`${name}: audio must be a Float32Array`, "undecodable");
      const { clip, width, starts, seconds } = this.prepareAudio(source, allowClipped, name);
      const total = new Float64Array(manifest.dim);
      for (let first = 0; first < starts.length; first += WINDOW_BATCH) {
        const chunk = starts.slice(first, first + WINDOW_BATCH);
        const batch = new Float32Array(chunk.length * width);
        chunk.forEach((s, i) => batch.set(clip.subarray(s, s + width), i * width));
        const out = await this.run(batch, [chunk.length, width]);
        // output.sum(axis=0, dtype=float64): rows added in order, then added to the total
        const sums = new Float64Array(manifest.dim);
        for (let r = 0; r < chunk.length; r++) for (let j = 0; j < manifest.dim; j++) sums[j]! += out[r * manifest.dim + j]!;
        for (let j = 0; j < manifest.dim; j++) total[j]! += sums[j]!;
      }
      const vector = Float32Array.from(total, (x) => x / starts.length);
      return { vector, seconds, windows: starts.length };
    }
    const spec = manifest.input;
    if (!(source instanceof Uint8Array) || source.length !== spec.height * spec.width * spec.channels) {
      throw new MediaError(
        `${name}: image of ${source.length} values is not the model's ${spec.height}×${spec.width}×${spec.channels}`,
        "not_image",
      );
    }
    const out = await this.run(source, [1, spec.height, spec.width, spec.channels]);
    return { vector: Float32Array.from(out), windows: 1 };
  }

  /**
   * `embed`: the model's vector for one input (checks, silence trimming, windows in batches of
   * 16, the float64 mean of the outputs, as float32). Clipped audio is accepted here.
   */
  async embed(source: Sample): Promise<Float32Array> {
    return (await this.embedWith(source, true)).vector;
  }

  /**
   * Feedback on one clip without running the model: the checks enrollment (`enrollment: true`,
   * clipped refused) or verification applies, and how many seconds would be used.
   */
  checkSample(samples: Float32Array, options: { enrollment?: boolean; name?: string } = {}): SampleReport {
    if (this.bundle.manifest.input.kind !== "audio") throw new UvsdkError("checkSample is for audio bundles", "argument.invalid");
    try {
      const { seconds, starts } = this.prepareAudio(samples, !options.enrollment, options.name ?? "input");
      return { ok: true, message: "usable", seconds, windows: starts.length };
    } catch (error) {
      if (error instanceof MediaError) return { ok: false, reason: error.reason, message: error.message };
      throw error;
    }
  }

  // -- codewords ---------------------------------------------------------------------------

  /**
   * `new_codeword`: make the user's secret FedUV codeword from the bundle's code (or `code`) and
   * keep it, encrypted, in the store. Returns the user id (not secret), never the codeword.
   */
  async newCodeword(user = "default", userId?: number | bigint, code?: Code): Promise<number | bigint> {
    const chosenCode = code ?? this.bundle.manifest.code;
    if (!chosenCode) {
      throw new BundleError(`${this.bundle.name} outputs embeddings, not codewords: codeword new needs a codeword bundle`, "bundle.wrong-kind");
    }
    checkUser(user);
    return this.locked(user, async () => {
      const existing = (await this.templates.exists(user)) ? await this.templates.load(user) : null;
      if (existing !== null && existing.codeword !== null) {
        throw new UvsdkError(
          `user ${quote(user)} already has a codeword; delete the template first ` +
            `(uvsdk delete --user ${user}) if you really mean to replace it`, "codeword.exists",
        );
      }
      const chosen = userId === undefined ? randomUserId(chosenCode.idBits) : userId;
      const bits = encode(newMessage(chosen, chosenCode.idBits, chosenCode.k), chosenCode.generator);
      const base = existing ?? newTemplate(user, this.clock());
      await this.templates.save({ ...base, codeword: bits, userId: chosen, codeSha256: chosenCode.fingerprint });
      return typeof chosen === "bigint" && chosen <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(chosen) : chosen;
    }, { create: true });
  }

  // -- enrollment --------------------------------------------------------------------------

  /**
   * `enroll`: enroll a user from at least five usable samples. The threshold is the bundle's
   * calibrated threshold at `far` (default: the verifier's) for a table with genuine trials
   * (prototype), the warm-up rule at `targetTpr` floored at it for one without (codeword), the
   * warm-up rule alone without a table (spec §4.3). `mode` ({@link enrollmentMode}, default
   * `auto`): codeword mode when the user holds a codeword and the bundle is a codeword bundle
   * whose `training.enrollment` is not `prototype`; `prototype` always; `codeword` insists (an
   * EnrollmentError without one). The codeword must be of the bundle's code. Unusable samples are
   * skipped and reported; fewer than five usable ones is an EnrollmentError and nothing is
   * written.
   */
  async enroll(
    samples: Sample[],
    options: {
      user?: string;
      targetTpr?: number;
      far?: number | null;
      mode?: RequestedMode;
      onSample?: (report: SampleReport) => void;
    } = {},
  ): Promise<EnrollmentReport> {
    const user = options.user ?? "default";
    const targetTpr = options.targetTpr ?? DEFAULT_TARGET_TPR;
    if (!(targetTpr > 0 && targetTpr <= 1)) throw new UvsdkError(`the target TPR must be in (0, 1], not ${targetTpr}`, "argument.invalid");
    const far = options.far === undefined ? this.far : options.far === null ? null : checkFar(options.far);
    checkUser(user);
    const manifest = this.bundle.manifest;
    const calibration = manifest.calibration;
    if (far !== null && calibration !== null) {
      for (const table of Object.values(calibration.tables)) if (table) rowFor(table, far);
    }
    const requested = options.mode ?? "auto";
    checkMode(requested, manifest);
    if (samples.length === 0) throw new EnrollmentError("no samples given", "enroll.samples");
    const reports: SampleReport[] = [];
    const vectors: Float32Array[] = [];
    for (let i = 0; i < samples.length; i++) {
      let report: SampleReport;
      try {
        const { vector, seconds, windows } = await this.embedWith(samples[i]!, false, `sample ${i + 1}`);
        vectors.push(vector);
        report = { ok: true, message: "used", seconds, windows };
      } catch (error) {
        if (!(error instanceof MediaError)) throw error;
        report = { ok: false, reason: error.reason, message: error.message };
      }
      reports.push(report);
      options.onSample?.(report);
    }
    if (vectors.length < MIN_ENROLLMENT_SAMPLES) computeEnrollment(vectors, { of: samples.length }); // throws
    return this.locked(user, async () => {
      const existing = (await this.templates.exists(user)) ? await this.templates.load(user) : null;
      const base = existing ?? newTemplate(user, this.clock());
      const useCodeword = enrollmentMode(requested, manifest, base.codeword !== null) === "codeword";
      if (useCodeword && base.codeSha256 !== manifest.code!.fingerprint) {
        throw new ModelMismatchError(
          `user ${quote(user)}'s codeword was made for another code than ` +
            `${this.bundle.name}'s; make a new one with uvsdk codeword new`,
        );
      }
      const result = computeEnrollment(vectors, {
        codeword: useCodeword ? base.codeword : null,
        targetTpr,
        calibration,
        far,
        cohort: this.bundle.cohort,
        centre: this.bundle.centre,
      });
      const { mode, threshold, row, floored, ownRejected, scores } = result;
      await this.templates.save({
        ...base,
        mode,
        prototype: result.prototype,
        threshold,
        targetTpr,
        far: row !== null ? far : null,
        calibration: calibration !== null && row !== null ? calibration.sha256 : null,
        cohort: mode === "prototype" ? scoreScale(manifest) : null,
        modelSha256: manifest.modelSha256,
        enrolled: this.clock(),
        samples: vectors.length,
        policy: this.backoffPolicy,
        backoff: { failures: 0, lockedUntil: 0 },
      });
      let expectedFar: string | null = null;
      let expectedFrr: string | null = null;
      let advice: string | null = null;
      let heldOut: HeldOut | null = null;
      if (row !== null && calibration !== null) {
        const table = calibration.tables[mode]!;
        [expectedFar, expectedFrr] = expected(table, threshold);
        if (table.heldOut && threshold === row.threshold) heldOut = table.heldOut;
        if (rerecordAdvised(ownRejected, scores.length, targetTpr, row)) {
          advice =
            `${ownRejected} of your ${scores.length} samples score below the bundle's ` +
            "calibrated threshold: they vary more than one person's usually do. " +
            "Re-record them in one quiet place, with the same microphone, speaking " +
            "normally, then enroll again";
        }
      }
      return {
        user,
        mode,
        targetTpr,
        samples: reports,
        used: vectors.length,
        far: row !== null ? far : null,
        expectedFar,
        expectedFrr,
        floored,
        ownRejected,
        advice,
        heldOut: heldOut === null || row === null ? null : heldOutRowFor(heldOut, row.far),
        heldOutChains: heldOut === null ? null : heldOut.chains,
        heldOutSeconds: heldOut === null ? null : heldOut.minSeconds,
      };
    }, { create: true });
  }

  // -- verification ------------------------------------------------------------------------

  private async enrolledTemplate(user: string): Promise<Template> {
    const template = await this.templates.load(user);
    if (!isEnrolled(template)) {
      throw new NotEnrolledError(`user ${quote(user)} has a codeword but is not enrolled yet (run uvsdk enroll)`);
    }
    if (template.modelSha256 !== this.bundle.manifest.modelSha256) {
      throw new ModelMismatchError(
        `user ${quote(user)} was enrolled with another model than ${this.bundle.name}: re-enroll with uvsdk enroll`,
      );
    }
    if (template.mode === "prototype" && template.cohort !== scoreScale(this.bundle.manifest)) {
      throw new ModelMismatchError(
        `user ${quote(user)} was enrolled with another score normalisation (cohort or rule) than ` +
          `${this.bundle.name}'s: re-enroll with uvsdk enroll`,
      );
    }
    const calibration = this.bundle.manifest.calibration;
    if (template.calibration !== null && (calibration === null || template.calibration !== calibration.sha256)) {
      // The threshold came from a calibration this bundle does not carry: a manifest swapped for
      // one enrollment must not leave its threshold behind (spec §9.2).
      throw new ModelMismatchError(
        `user ${quote(user)} was enrolled under another calibration than ${this.bundle.name}'s: re-enroll with uvsdk enroll`,
      );
    }
    return template;
  }

  private scoreWith(template: Template, vector: Float32Array): number {
    if (template.mode === "codeword") {
      if (template.codeword === null) throw new NotEnrolledError(`user ${quote(template.user)}'s template has no codeword`);
      return codewordScore(bipolar(template.codeword), vector);
    }
    if (template.prototype === null) throw new NotEnrolledError(`user ${quote(template.user)}'s template has no prototype`);
    const test = centred(this.bundle, vector);
    const score = cosine(template.prototype, test);
    const cohort = this.bundle.cohort;
    return cohort === null ? score : cohort.normalised(score, template.prototype, test);
  }

  /** `score`: the user's score for one input, with no decision and no back-off bookkeeping. */
  async score(source: Sample, user = "default"): Promise<number> {
    const template = await this.enrolledTemplate(user);
    return this.scoreWith(template, await this.embed(source));
  }

  /**
   * `verify`: accept iff the score reaches the user's threshold. With `backoff` (default) a
   * locked-out user gets LockedOutError before anything is computed, and the attempt is written
   * into the template as a failure *before* the score is computed (if it cannot be written:
   * AttemptNotRecordedError, no score); an acceptance then resets the count.
   */
  async verify(source: Sample, options: { user?: string; backoff?: boolean } = {}): Promise<Decision> {
    const user = options.user ?? "default";
    if (options.backoff === false) {
      const template = await this.enrolledTemplate(user);
      const score = this.scoreWith(template, await this.embed(source));
      return { score, threshold: template.threshold!, accepted: score >= template.threshold! };
    }
    checkUser(user);
    return this.locked(user, async () => {
      const template = await this.enrolledTemplate(user);
      const now = this.clock();
      backoffRules.check(template.backoff, user, now);
      const vector = await this.embed(source);
      const failed = backoffRules.record(template.backoff, template.policy, false, now);
      try {
        await this.templates.save({ ...template, backoff: failed }, { create: false });
      } catch (error) {
        if (error instanceof NotEnrolledError) throw error; // deleted meanwhile: say so
        const detail = error instanceof Error ? error.message : String(error);
        throw new AttemptNotRecordedError(`verification refused: the attempt cannot be recorded (${detail})`);
      }
      const score = this.scoreWith(template, vector);
      const accepted = score >= template.threshold!;
      if (accepted) {
        try {
          await this.templates.save({ ...template, backoff: { failures: 0, lockedUntil: 0 } });
        } catch (error) {
          if (!(error instanceof UvsdkError)) throw error; // the decision stands; the count stays one too high
        }
      }
      return { score, threshold: template.threshold!, accepted };
    });
  }

  /** `delete`: remove the user's template. */
  async delete(user = "default"): Promise<void> {
    checkUser(user);
    await this.locked(user, () => this.templates.delete(user));
  }
}
