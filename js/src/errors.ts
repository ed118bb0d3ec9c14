/**
 * The SDK's error types, mirroring sdk/uvsdk/errors.py.
 *
 * Every error the SDK raises on bad input is a {@link UvsdkError}: its message is one line meant
 * for a person and never contains a secret (codeword, prototype, threshold, key or passphrase).
 */

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

/** Base class of every error the SDK raises on purpose (errors.UvsdkError). */
export class UvsdkError extends Error {
  constructor(message: string) {
    // One line, always: runs of whitespace collapse to one space, control characters are escaped.
    super(printable(String(message).split(/\s+/).filter(Boolean).join(" ")));
    this.name = new.target.name;
  }
}

/** The model bundle is missing, truncated, tampered, of an unknown format or inconsistent. */
export class BundleError extends UvsdkError {}

/** The bundle's signature is missing or does not verify against a trusted key. */
export class SignatureError extends BundleError {}

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

/** An input could not be used; `reason` is a short machine-readable word. */
export class MediaError extends UvsdkError {
  readonly reason: MediaReason;
  constructor(message: string, reason: MediaReason = "undecodable") {
    super(message);
    this.reason = reason;
  }
}

/** A template file is corrupt or was modified. */
export class TemplateError extends UvsdkError {}

/** The passphrase (or platform key) does not open this template. */
export class WrongKeyError extends TemplateError {}

/** The template is older than the last one written on this device (a copy was put back). */
export class RollbackError extends TemplateError {}

/** The template was made with another model (or code) than the bundle in use. */
export class ModelMismatchError extends TemplateError {}

/** The store or freshness folder or a template file can be written by another user, or is theirs. */
export class StorePermissionError extends UvsdkError {}

/** No passphrase or platform key could be had. */
export class KeyUnavailableError extends UvsdkError {}

/** The user has no template, or only a codeword and no enrollment yet. */
export class NotEnrolledError extends UvsdkError {}

/** Enrollment could not be completed (e.g. fewer usable samples than required). */
export class EnrollmentError extends UvsdkError {}

/** Verification was refused because the attempt could not be written into the template. */
export class AttemptNotRecordedError extends UvsdkError {}

/** Too many consecutive rejections: verification is refused until `until` (Unix seconds). */
export class LockedOutError extends UvsdkError {
  readonly until: number;
  constructor(message: string, until: number) {
    super(message);
    this.until = until;
  }
}

/** A FAR outside (0, 0.5], or one the bundle's calibration cannot state. */
export class CalibrationError extends UvsdkError {}
