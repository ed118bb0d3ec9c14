/**
 * Python's number semantics where the SDK depends on them: `round()` (ties to even),
 * `repr(float)`, format specs `g`, `.Nf`, `.Ng`, `.N%`, and `repr()` of JSON values for
 * messages. Internal helpers; exported for the tests.
 */

/**
 * Python's `round(x)` of a float: nearest integer, ties to even (banker's rounding).
 * `x - floor(x)` is exact for doubles, so the tie test is exact.
 */
export function pyRound(x: number): number {
  if (!Number.isFinite(x)) throw new RangeError(`cannot round ${x}`);
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** Shortest round-trip digits and decimal exponent of |x| (x finite, non-zero). */
function shortest(x: number): { digits: string; exp: number } {
  const [mantissa, e] = Math.abs(x).toExponential().split("e");
  return { digits: mantissa!.replace(".", ""), exp: Number(e) };
}

/** `repr(x)` of a Python float (also what `json.dumps` writes for it). */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const { digits, exp } = shortest(x);
  if (exp >= -4 && exp < 16) {
    const point = exp + 1;
    if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
    if (point >= digits.length) return `${sign}${digits}${"0".repeat(point - digits.length)}.0`;
    return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

/**
 * The decimal digits of |x| correctly rounded to `count` significant digits, ties to even as
 * CPython does (JavaScript's toExponential/toFixed round ties away from zero).
 */
function roundSignificant(x: number, count: number): { digits: string; exp: number } {
  const exact = Math.abs(x).toExponential(Math.min(100, count + 60));
  const [m, e] = exact.split("e");
  const all = m!.replace(".", "");
  let exp = Number(e);
  const head = all.slice(0, count);
  const tail = all.slice(count);
  let up = false;
  if (tail.length > 0) {
    if (tail[0]! > "5") up = true;
    else if (tail[0] === "5") {
      const rest = tail.slice(1);
      // Not exactly half (a non-zero digit later, or digits beyond the 100 toExponential gives).
      const beyond = /[1-9]/.test(rest) || exact.length >= 100 + 3;
      up = beyond || Number(head[head.length - 1]) % 2 === 1;
    }
  }
  let digits = head;
  if (up) {
    const n = (BigInt(head) + 1n).toString();
    if (n.length > head.length) {
      digits = n.slice(0, count);
      exp += 1;
    } else digits = n;
  }
  return { digits, exp };
}

/** `format(x, ".{precision}f")` as Python writes it. */
export function pyFixed(x: number, precision: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  if (x === 0) return sign + (precision > 0 ? `0.${"0".repeat(precision)}` : "0");
  const { exp } = shortest(x);
  const count = exp + 1 + precision;
  let digits: string;
  let e: number;
  if (count <= 0) {
    // Rounds to 0 or to one unit of the last place.
    const half = 0.5 * 10 ** -precision;
    const ax = Math.abs(x);
    digits = ax > half ? "1" : "0";
    e = -precision;
  } else {
    ({ digits, exp: e } = roundSignificant(x, count));
    e = e - digits.length + 1; // exponent of the last digit
  }
  // value = digits * 10^e with e = -precision (or larger after a carry)
  const units = BigInt(digits) * 10n ** BigInt(Math.max(0, e + precision));
  const s = units.toString().padStart(precision + 1, "0");
  const whole = s.slice(0, s.length - precision);
  const frac = s.slice(s.length - precision);
  return sign + (precision > 0 ? `${whole}.${frac}` : whole);
}

/** `format(x, "g")` / `format(x, ".{precision}g")` as Python writes it. */
export function pyG(x: number, precision = 6): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const p = precision === 0 ? 1 : precision;
  const sign = x < 0 ? "-" : "";
  const { digits, exp } = roundSignificant(x, p);
  const trimmed = digits.replace(/0+$/, "") || "0";
  if (exp < -4 || exp >= p) {
    const m = trimmed.length > 1 ? `${trimmed[0]}.${trimmed.slice(1)}` : trimmed;
    return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  const point = exp + 1;
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${trimmed}`;
  if (point >= trimmed.length) return `${sign}${trimmed}${"0".repeat(point - trimmed.length)}`;
  return `${sign}${trimmed.slice(0, point)}.${trimmed.slice(point)}`;
}

/** `format(x, ".{precision}%")`. */
export function pyPercent(x: number, precision: number): string {
  return `${pyFixed(x * 100, precision)}%`;
}

/** `repr()` of a string, as Python writes it (quotes chosen the same way). */
export function pyStrRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const code = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code >= 0xd800 && code <= 0xdfff) out += `\\u${code.toString(16)}`;
    else out += ch;
  }
  return out + quote;
}

/** `repr()` of a parsed JSON value (see pyjson: integers are bigint), for messages. */
export function pyRepr(value: unknown): string {
  if (value === undefined || value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") return pyFloatRepr(value);
  if (typeof value === "string") return pyStrRepr(value);
  if (Array.isArray(value)) return `[${value.map(pyRepr).join(", ")}]`;
  if (typeof value === "object") {
    const parts = Object.keys(value).map(
      (k) => `${pyStrRepr(k)}: ${pyRepr((value as Record<string, unknown>)[k])}`,
    );
    return `{${parts.join(", ")}}`;
  }
  return String(value);
}

/** `f"{value!r:.{width}}"`: the repr cut to `width` characters. */
export function pyReprCut(value: unknown, width = 40): string {
  return [...pyRepr(value)].slice(0, width).join("");
}
