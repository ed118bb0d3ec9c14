// What the page says, as plain functions (no DOM), so that Node tests check the very sentences the
// page (app.js) shows: the bundle's calibration line (test/readme-figures.test.mjs checks
// js/README's quoted line against what it gives for the shipped default bundle) and a
// verification's verdict (test/wording.test.mjs).
import { rowFor, SCORE_RULES } from "../dist/src/index.js";

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

/**
 * A decision in one sentence, without the user's threshold (a secret, docs/spec.md §11): how far
 * the score is above or below it, and the scale the score is on (its score rule's): `mode` is the template's,
 * `scoreNorm` the bundle's (manifest.scoreNorm; null without a cohort: raw cosines). "Accepted: this clip
 * scored 2.1 above your threshold (in standard deviations of strangers' scores)." The score is
 * not shown either: with the margin it would give the threshold away.
 */
export function verdict(decision, mode, scoreNorm) {
  const margin = decision.score - decision.threshold;
  const distance = Math.abs(margin);
  const size = distance >= 1 ? distance.toFixed(1) : distance >= 0.005 ? distance.toFixed(2) : "less than 0.01";
  const where = margin === 0 ? "exactly at your threshold" : `${size} ${margin > 0 ? "above" : "below"} your threshold`;
  const scale = mode === "prototype" ? SCORE_RULES[scoreNorm?.method ?? "cosine"].scale : "scores run from −1 to 1";
  return `${decision.accepted ? "Accepted" : "Rejected"}: this clip scored ${where} (${scale}).`;
}
