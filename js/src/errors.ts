/**
 * The SDK's error types, mirroring sdk/uvsdk/errors.py.
 *
 * Every error the SDK raises on bad input is a {@link UvsdkError}: its message is one line meant
 * for a person and never contains a secret (codeword, prototype, threshold, key or passphrase).
 * Its `code` (one of {@link ERROR_CODES}, docs/spec.md §14) is what a program branches on: the
 * same as the Python SDK's, stable across releases, while the wording of messages may differ.
 */

/** Every error code, in the order of docs/spec.md §14 (sdk/uvsdk/errors.py lists the same). */
export const ERROR_CODES = [
  "bundle.not-found",
  "bundle.unreadable",
  "bundle.member-missing",
  "bundle.member-unexpected",
  "bundle.digest-mismatch",
  "bundle.manifest",
  "bundle.member-invalid",
  "bundle.unsupported",
  "bundle.model",
  "bundle.wrong-kind",
  "bundle.signature",
  "bundle.trusted-key",
  "media.undecodable",
  "media.truncated",
  "media.too-short",
  "media.too-long",
  "media.silent",
  "media.clipped",
  "media.non-finite",
  "media.out-of-range",
  "media.empty",
  "media.not-image",
  "template.not-a-template",
  "template.header-modified",
  "template.key-parameters",
  "template.wrong-passphrase",
  "template.wrong-key",
  "template.modified",
  "template.malformed",
  "template.wrong-user",
  "template.rolled-back",
  "template.model-mismatch",
  "template.unreadable",
  "template.freshness",
  "key.unavailable",
  "store.permissions",
  "store.io",
  "store.locked",
  "store.user-name",
  "user.not-enrolled",
  "codeword.exists",
  "codeword.user-id",
  "enroll.samples",
  "enroll.too-few-samples",
  "enroll.mode",
  "calibration.far-invalid",
  "calibration.far-unstated",
  "verify.locked-out",
  "verify.attempt-not-recorded",
  "argument.invalid",
] as const;

/** One of {@link ERROR_CODES}. */
export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * `text` safe to print on one line (errors.printable): control characters and lone surrogates
 * are escaped as `\n`, `\x1b`, `\udcff`.
 */
export function printable(text: string): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        out += text[i] + text[i + 1];
        i++;
        continue;
      }
    }
    if (code >= 0xd800 && code <= 0xdfff) {
      out += `\\u${code.toString(16).padStart(4, "0")}`;
    } else if (code === 0x0a) {
      out += "\\n";
    } else if (code === 0x0d) {
      out += "\\r";
    } else if (code === 0x09) {
      out += "\\t";
    } else if (code < 0x20 || (code >= 0x7f && code <= 0xa0) || code === 0xad) {
      out += `\\x${code.toString(16).padStart(2, "0")}`;
    } else if (code === 0x2028 || code === 0x2029) {
      out += `\\u${code.toString(16)}`;
    } else {
      out += text[i];
    }
  }
  return out;
}

/**
 * Base class of every error the SDK raises on purpose (errors.UvsdkError). `code` defaults to the
 * class's `defaultCode`; this base class has none, so raising it needs one.
 */
export class UvsdkError extends Error {
  static readonly defaultCode: ErrorCode | null = null;
  readonly code: ErrorCode;
  constructor(message: string, code?: ErrorCode) {
    // One line, always: runs of whitespace collapse to one space, control characters are escaped.
    super(printable(String(message).split(/\s+/).filter(Boolean).join(" ")));
    this.name = new.target.name;
    const chosen = code ?? (new.target as typeof UvsdkError).defaultCode;
    if (chosen === null) throw new TypeError(`${new.target.name} needs an error code`);
    this.code = chosen;
  }
}

/** The model bundle is missing, truncated, tampered, of an unknown format or inconsistent. */
export class BundleError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "bundle.manifest";
}

/** The bundle's signature is missing or does not verify against a trusted key. */
export class SignatureError extends BundleError {
  static override readonly defaultCode: ErrorCode = "bundle.signature";
}

/** Why a media input was refused (errors.MediaError.reason). */
export type MediaReason =
  | "undecodable"
  | "truncated"
  | "too_short"
  | "too_long"
  | "silent"
  | "clipped"
  | "non_finite"
  | "out_of_range"
  | "empty"
  | "not_image";

/**
 * An input could not be used; `reason` is a short machine-readable word, and the code is `media.`
 * and the reason with hyphens (`media.too-short`).
 */
export class MediaError extends UvsdkError {
  readonly reason: MediaReason;
  constructor(message: string, reason: MediaReason = "undecodable") {
    super(message, `media.${reason.replace(/_/g, "-")}` as ErrorCode);
    this.reason = reason;
  }
}

/** A template file is corrupt or was modified. */
export class TemplateError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "template.modified";
}

/** The passphrase (or platform key) does not open this template. */
export class WrongKeyError extends TemplateError {
  static override readonly defaultCode: ErrorCode = "template.wrong-passphrase";
}

/** The template is older than the last one written on this device (a copy was put back). */
export class RollbackError extends TemplateError {
  static override readonly defaultCode: ErrorCode = "template.rolled-back";
}

/** The template was made with another model (or code) than the bundle in use. */
export class ModelMismatchError extends TemplateError {
  static override readonly defaultCode: ErrorCode = "template.model-mismatch";
}

/** The store or freshness folder or a template file can be written by another user, or is theirs. */
export class StorePermissionError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "store.permissions";
}

/** No passphrase or platform key could be had. */
export class KeyUnavailableError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "key.unavailable";
}

/** The user has no template, or only a codeword and no enrollment yet. */
export class NotEnrolledError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "user.not-enrolled";
}

/** Enrollment could not be completed (e.g. fewer usable samples than required). */
export class EnrollmentError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "enroll.too-few-samples";
}

/** Verification was refused because the attempt could not be written into the template. */
export class AttemptNotRecordedError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "verify.attempt-not-recorded";
}

/** Too many consecutive rejections: verification is refused until `until` (Unix seconds). */
export class LockedOutError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "verify.locked-out";
  readonly until: number;
  constructor(message: string, until: number) {
    super(message);
    this.until = until;
  }
}

/** A FAR outside (0, 0.5], or one the bundle's calibration cannot state. */
export class CalibrationError extends UvsdkError {
  static override readonly defaultCode: ErrorCode = "calibration.far-unstated";
}
