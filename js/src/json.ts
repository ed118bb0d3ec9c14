/**
 * JSON read as the Python SDK reads it (its checks tell integers from floats), and written as RFC 8785.
 *
 * JavaScript's JSON.parse loses the difference between `2` and `2.0`, which the Python SDK's
 * checks depend on (`isinstance(value, int)`: a manifest's `sample_rate` of `16000.0` is refused).
 * {@link parseJson} therefore returns integer literals as `bigint` and every other number as a
 * `number`; objects are null-prototype records. It also accepts Python's `NaN`, `Infinity` and
 * `-Infinity` tokens (which `json.loads` reads), so the finiteness checks behave as in Python.
 * Writing is {@link canonicalJson} (RFC 8785), the same bytes in every implementation.
 */

/** A parsed JSON value: integers are bigint, other numbers number. */
export type JsonValue = null | boolean | bigint | number | string | JsonValue[] | JsonObject;
/** A parsed JSON object (null prototype). */
export interface JsonObject {
  [key: string]: JsonValue;
}

/** Raised for text that is not JSON: what was wrong, and at which character. */
export class JsonSyntaxError extends Error {
  constructor(message: string, position: number) {
    super(`${message} at character ${position}`);
    this.name = "JsonSyntaxError";
  }
}

/** Raised for text over the limits below (as uvsdk.jsonlimits.JsonLimitError). */
export class JsonLimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JsonLimitError";
  }
}

/** Most arrays and objects open at once (the outermost counts), as uvsdk.jsonlimits.MAX_DEPTH. */
export const MAX_DEPTH = 64;
/** Longest number literal accepted, in characters. */
export const MAX_NUMBER_CHARACTERS = 64;
/** Largest magnitude of an integer literal: what a `number` holds exactly. */
export const MAX_INTEGER = BigInt(Number.MAX_SAFE_INTEGER);

const STRING_OR_BRACKET = /"(?:[^"\\]|\\[\s\S])*"|[[\]{}]/g;

/** `jsonlimits.check_depth`: refuse text whose brackets outside strings nest deeper than MAX_DEPTH. */
export function checkDepth(text: string): void {
  let depth = 0;
  for (const match of text.matchAll(STRING_OR_BRACKET)) {
    const token = match[0];
    if (token === "[" || token === "{") {
      depth++;
      if (depth > MAX_DEPTH) throw new JsonLimitError(`nested deeper than ${MAX_DEPTH} levels`);
    } else if (token === "]" || token === "}") depth--;
  }
}

/** A number literal within the limits, as `jsonlimits._integer` and `_float` read it. */
function numberValue(literal: string, integer: boolean): bigint | number {
  if (literal.length > MAX_NUMBER_CHARACTERS) {
    throw new JsonLimitError(
      `a number of ${literal.length} characters, more than the ${MAX_NUMBER_CHARACTERS} accepted`,
    );
  }
  if (!integer) return Number(literal);
  const value = BigInt(literal);
  if (value > MAX_INTEGER || -value > MAX_INTEGER) throw new JsonLimitError("an integer beyond 2**53 - 1 in magnitude");
  return value;
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;

/**
 * Parse JSON text the way `uvsdk.jsonlimits.load_bounded_json` does: Python's `json.loads` (see
 * the module comment) within MAX_DEPTH (checked first) and the number limits. Throws
 * JsonSyntaxError or JsonLimitError.
 */
export function parseJson(text: string): JsonValue {
  checkDepth(text);
  let i = 0;
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const fail = (message: string): never => {
    throw new JsonSyntaxError(message, i);
  };
  const value = (): JsonValue => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const object: JsonObject = Object.create(null) as JsonObject;
      ws();
      if (text[i] === "}") {
        i++;
        return object;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("a key in double quotes expected");
        const key = string();
        ws();
        if (text[i] !== ":") fail("':' expected");
        i++;
        object[key] = value();
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "}") {
          i++;
          return object;
        }
        fail("',' or a closing bracket expected");
      }
    }
    if (c === "[") {
      i++;
      const array: JsonValue[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return array;
      }
      for (;;) {
        array.push(value());
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "]") {
          i++;
          return array;
        }
        fail("',' or a closing bracket expected");
      }
    }
    if (c === '"') return string();
    if (text.startsWith("null", i)) return (i += 4), null;
    if (text.startsWith("true", i)) return (i += 4), true;
    if (text.startsWith("false", i)) return (i += 5), false;
    if (text.startsWith("NaN", i)) return (i += 3), NaN;
    if (text.startsWith("Infinity", i)) return (i += 8), Infinity;
    if (text.startsWith("-Infinity", i)) return (i += 9), -Infinity;
    NUMBER.lastIndex = i;
    const match = NUMBER.exec(text);
    if (!match) return fail("a value expected");
    i += match[0].length;
    return numberValue(match[0], match[1] === undefined && match[2] === undefined);
  };
  const string = (): string => {
    i++; // opening quote
    let out = "";
    for (;;) {
      if (i >= text.length) fail("a string not closed");
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return out;
      }
      if (c < 0x20) fail("a control character in a string");
      if (c === 0x5c) {
        const e = text[i + 1];
        const simple: Record<string, string> = {
          '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t",
        };
        if (e !== undefined && e in simple) {
          out += simple[e];
          i += 2;
        } else if (e === "u") {
          const hex = text.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("a malformed \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          i += 6;
        } else fail("an unknown escape");
      } else {
        out += text[i];
        i++;
      }
    }
  };
  const result = value();
  ws();
  if (i !== text.length) fail("text after the value");
  return result;
}

/** Whether `value` is a parsed JSON object (not an array, not null). */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Python's `isinstance(value, int) and not isinstance(value, bool)` for a parsed value. */
export function isInt(value: unknown): value is bigint {
  return typeof value === "bigint";
}

/** Python's `isinstance(value, int | float) and not isinstance(value, bool)`. */
export function isNumber(value: unknown): value is bigint | number {
  return typeof value === "bigint" || typeof value === "number";
}

/** A parsed value with bigints turned into numbers (for JSON.stringify, JCS, `extra`). */
export function toPlain(value: unknown): unknown {
  if (typeof value === "bigint") return Number(value);
  if (Array.isArray(value)) return value.map(toPlain);
  if (isObject(value)) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value)) out[key] = toPlain(value[key]);
    return out;
  }
  return value;
}

/**
 * RFC 8785 (JCS) canonical JSON of a plain value: keys sorted by UTF-16 code units, no
 * whitespace, numbers and strings as ECMAScript's JSON.stringify writes them.
 */
export function canonicalJson(value: unknown): string {
  if (typeof value === "bigint") return canonicalJson(Number(value));
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new RangeError("JCS has no representation for a non-finite number");
    }
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(record[k])}`).join(",")}}`;
}
