// The page's verdict sentence (web/wording.js verdict): accept or reject, how far above or below
// the user's threshold, on the score's scale, and never the threshold or the score themselves
// (docs/spec.md §11: a port does not display the threshold; score and margin would give it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { verdict } from "../web/wording.js";

const AS_NORM = { method: "as-norm", topK: 10 };

test("verdict: the margin, rounded as a person reads it, on the scale of the template's mode", () => {
  const cases = [
    [{ score: 5.8, threshold: 3.7, accepted: true }, "prototype", AS_NORM, "Accepted: this clip scored 2.1 above your threshold (in standard deviations of strangers' scores)."],
    [{ score: 1.2, threshold: 3.7, accepted: false }, "prototype", { method: "s-norm", topK: null }, "Rejected: this clip scored 2.5 below your threshold (in standard deviations of strangers' scores)."],
    [{ score: 0.8125, threshold: 0.6, accepted: true }, "prototype", null, "Accepted: this clip scored 0.21 above your threshold (cosine scores run from −1 to 1)."],
    [{ score: 0.31, threshold: 0.6, accepted: false }, "prototype", null, "Rejected: this clip scored 0.29 below your threshold (cosine scores run from −1 to 1)."],
    [{ score: 0.5, threshold: 0.502, accepted: false }, "prototype", null, "Rejected: this clip scored less than 0.01 below your threshold (cosine scores run from −1 to 1)."],
    [{ score: 0.6, threshold: 0.6, accepted: true }, "prototype", null, "Accepted: this clip scored exactly at your threshold (cosine scores run from −1 to 1)."],
    // codeword scores are never normalised, a cohort or not
    [{ score: 0.9, threshold: 0.45, accepted: true }, "codeword", AS_NORM, "Accepted: this clip scored 0.45 above your threshold (scores run from −1 to 1)."],
  ];
  for (const [decision, mode, norm, expected] of cases) assert.equal(verdict(decision, mode, norm), expected, JSON.stringify(decision));
});

test("verdict: neither the threshold nor the score appears", () => {
  const decision = { score: 13.933, threshold: 3.7017, accepted: true };
  const text = verdict(decision, "prototype", AS_NORM);
  assert.equal(text, "Accepted: this clip scored 10.2 above your threshold (in standard deviations of strangers' scores).");
  for (const secret of ["3.7", "3.70", "13.9", "13.93"]) assert.ok(!text.includes(secret), `${secret} in ${text}`);
});
