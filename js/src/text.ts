/**
 * How the core writes values into its messages: JavaScript's own spelling. Messages are this
 * implementation's words; the error codes are the contract (docs/spec.md §14), so nothing here
 * copies another language's formatting.
 */

/** A string as a message shows it: JSON's quoting, so a control character cannot break the line. */
export function quote(text: string): string {
  return JSON.stringify(text);
}

/** A number as a message shows it: its shortest form, or rounded to `digits` significant digits. */
export function num(x: number, digits?: number): string {
  if (digits === undefined || !Number.isFinite(x)) return String(x);
  return String(Number(x.toPrecision(digits)));
}

/** A parsed JSON value (integers may be bigint) as JSON-like text, `absent` for a missing one. */
function render(value: unknown): string {
  if (value === undefined) return "absent";
  if (value === null) return "null";
  if (typeof value === "string") return quote(value);
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return `[${value.map(render).join(", ")}]`;
  if (typeof value === "object") {
    const record = value as Record<string, unknown>;
    return `{${Object.keys(record).map((k) => `${quote(k)}: ${render(record[k])}`).join(", ")}}`;
  }
  return typeof value;
}

/** A value a message names (what was found instead of what was expected), cut to `width` characters. */
export function shown(value: unknown, width = 40): string {
  const text = [...render(value)];
  return text.length <= width ? text.join("") : `${text.slice(0, width - 1).join("")}…`;
}
