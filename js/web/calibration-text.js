// What the page says about a bundle's calibration, as plain functions (no DOM): the page (app.js)
// shows it, and test/readme-figures.test.mjs checks js/README's quoted line against what it gives
// for the shipped default bundle, so the README cannot drift from the page.
import { rowFor } from "../dist/src/index.js";

/** A count as a person reads it: 19558 -> "19,558". */
export const count = (n) => n.toLocaleString("en-US");

/** A false-accept (or any) rate as a person reads it: 0.01 -> "1 in 100", 0.0001 -> "1 in 10,000". */
export const oneIn = (rate) => `1 in ${count(Math.round(1 / rate))}`;

/** The calibration table the page's enrollments use: prototype mode (no codeword is given), or null. */
export function tableInUse(calibration, outputKind) {
  const tables = calibration?.tables ?? {};
  return tables.prototype ?? (outputKind === "codeword" ? tables.codeword : undefined) ?? null;
}

/**
 * The row of `table` the page enrolls with at `far` (null when the table states no FAR that low)
 * and the one line saying what it states: "Stated false-accept rate: 1 in 100 (measured on 24
 * people)", or the range of rates when no row is in use.
 */
export function calibrationSummary(table, far) {
  let used = null;
  try {
    used = rowFor(table, far);
  } catch {
    used = null; // the table states no FAR that low: the rows still show what it does state
  }
  const people = `measured on ${count(table.people)} people`;
  const text = used
    ? `Stated false-accept rate: ${oneIn(used.far)} (${people})`
    : `Stated false-accept rates: ${oneIn(table.rows[0].far)} to ${oneIn(table.rows.at(-1).far)} (${people})`;
  return { used, text };
}
