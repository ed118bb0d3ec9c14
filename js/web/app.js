// The uvsdk page: load a bundle, enroll a user from five microphone clips, verify, delete.
// Templates are UVT2 (scrypt + AES-256-GCM) in IndexedDB. The page never shows or logs a
// user's threshold, prototype or codeword (docs/spec.md §11): only the bundle's public
// calibration, the enrollment report, and a verification's decision with how far above or below
// the user's threshold it scored. Once a user is enrolled, recording waits for "Enroll again";
// deleting a template takes its passphrase and a confirmation.
import * as uv from "../dist/src/browser.js";
import { Microphone, resample } from "./audio.js";
import { calibrationSummary, count, oneIn, tableInUse, verdict } from "./wording.js";

const ORT_PATH = "/ort/";
const CLIPS = uv.MIN_ENROLLMENT_SAMPLES; // 5
const params = new URLSearchParams(location.search);
// ?seconds=N: length of each recording (default 3 s; the browser test uses shorter ones)
const CLIP_SECONDS = Math.min(10, Math.max(1, Number(params.get("seconds")) || 3));

const $ = (id) => document.getElementById(id);
const ui = {
  file: $("bundle-file"), status: $("bundle-status"), info: $("bundle-info"),
  user: $("user"), passphrase: $("passphrase"),
  record: $("record"), enroll: $("enroll"), resetClips: $("reset-clips"), reenroll: $("reenroll"),
  progress: $("progress"), clips: $("clips"), enrollResult: $("enroll-result"), enrollNote: $("enroll-note"),
  verify: $("verify"), delete: $("delete"), verifyResult: $("verify-result"), verifyNote: $("verify-note"),
  message: $("message"),
};

const microphone = new Microphone();
const state = {
  ort: null,
  bundle: null,
  store: null,
  checker: null, // a Verifier without a store or passphrase, for checkSample
  verifier: null, // bound to one passphrase (the Templates object caches the key it derived)
  passphrase: null,
  clips: [], // usable enrollment clips (Float32Array at the bundle's rate)
  attempts: 0,
  busy: false,
  enrolled: false, // whether the user named in the form has a template in this browser
  reenroll: false, // "Enroll again" was pressed: recording is open although the user is enrolled
  enrolledQuery: 0, // the latest template look-up (an older answer is ignored)
};

// -- progress -----------------------------------------------------------------------------------

let progressSteps = 0;

/**
 * Count one visible step (a message, a recording tick, a clip embedded): `body[data-progress]`,
 * which the browser tests watch to tell a slow page from a stuck one.
 */
function progressed() {
  progressSteps += 1;
  document.body.dataset.progress = String(progressSteps);
}

// -- messages ---------------------------------------------------------------------------------

function say(text, kind = "info") {
  ui.message.textContent = text;
  ui.message.className = `message ${kind}`;
  progressed();
}

const firstLine = (text) => String(text).split("\n")[0].slice(0, 300);

/** One line for an error, by what it means to the person using the page. */
function explain(error, user = ui.user.value.trim()) {
  const m = firstLine(error?.message ?? error);
  if (error instanceof uv.SignatureError) return `Bad bundle: its signature does not verify (${m})`;
  if (error instanceof uv.BundleError) return `Bad bundle: ${m}`;
  if (error instanceof uv.WrongKeyError) return `Wrong passphrase for ${user}'s template.`;
  if (error instanceof uv.RollbackError) return `Template refused: it is older than the last one written (rolled back).`;
  if (error instanceof uv.ModelMismatchError) return `${m}`;
  if (error instanceof uv.TemplateError) return `Template refused: it was modified or is damaged (${m}).`;
  if (error instanceof uv.NotEnrolledError) return `${user} is not enrolled: record 5 clips and enroll first.`;
  if (error instanceof uv.LockedOutError) return lockedMessage(error.until);
  if (error instanceof uv.KeyUnavailableError) return PASSPHRASE_FIRST;
  if (error instanceof uv.UvsdkError) return m;
  if (error?.name === "NotAllowedError") return "Microphone access was denied.";
  if (error?.name === "NotFoundError") return "No microphone found.";
  return `Error: ${m}`;
}

const PASSPHRASE_FIRST = "Enter a passphrase first: it encrypts the template.";

function lockedMessage(until) {
  const seconds = Math.max(1, Math.ceil(until - Date.now() / 1000));
  const at = new Date(until * 1000).toLocaleTimeString();
  return `Locked out after too many failed attempts: try again in ${seconds} s (at ${at}).`;
}

function fail(error) {
  if (!(error instanceof uv.UvsdkError)) console.error(error); // a bug, not a user's mistake
  if (error instanceof uv.NotEnrolledError) state.enrolled = false; // deleted elsewhere meanwhile
  say(explain(error), "error");
}

async function busy(task) {
  if (state.busy) return;
  state.busy = true;
  refresh();
  try {
    await task();
  } catch (error) {
    fail(error);
  } finally {
    state.busy = false;
    ui.progress.style.width = "0";
    refresh();
  }
}

function refresh() {
  const ready = state.bundle !== null && !state.busy;
  const audio = state.bundle?.manifest.input.kind === "audio";
  const user = ui.user.value.trim();
  const kept = state.enrolled && !state.reenroll; // enrolled: no recording until "Enroll again"
  ui.record.disabled = !ready || !audio || state.clips.length >= CLIPS || kept;
  ui.record.textContent = state.clips.length >= CLIPS ? `${CLIPS} clips recorded` : `Record clip ${state.clips.length + 1} of ${CLIPS}`;
  ui.enroll.disabled = !ready || state.clips.length < CLIPS;
  ui.resetClips.disabled = !ready || state.clips.length === 0;
  ui.reenroll.disabled = !ready || !audio || !kept;
  ui.enrollNote.textContent = !state.enrolled
    ? ""
    : kept
      ? `${user} is enrolled. To replace the template, press Enroll again; to remove it, Delete template.`
      : `Enroll replaces ${user}'s template (its passphrase must open it).`;
  ui.verify.disabled = !ready || !audio || !state.enrolled;
  ui.delete.disabled = !ready || !state.enrolled;
  ui.verifyNote.textContent = state.bundle === null || state.enrolled ? "" : `${user || "This user"} has no template in this browser yet: enroll first.`;
  ui.file.disabled = state.busy;
  document.body.dataset.busy = state.busy ? "1" : "0";
  progressed();
}

/** Look up whether the user named in the form has a template (Verify and Delete need one). */
async function checkEnrolled() {
  const query = ++state.enrolledQuery;
  let enrolled = false;
  try {
    state.store ??= await uv.IndexedDBStore.open("uvsdk");
    enrolled = await new uv.Templates(state.store).exists(ui.user.value.trim());
  } catch {
    enrolled = false; // not a valid user name (the form says why when it is used), or no IndexedDB
  }
  if (query !== state.enrolledQuery) return;
  if (enrolled !== state.enrolled) state.reenroll = false;
  state.enrolled = enrolled;
  refresh();
}

// -- the bundle -------------------------------------------------------------------------------

async function loadOrt() {
  const ort = await import(`${ORT_PATH}ort.wasm.min.mjs`);
  ort.env.wasm.wasmPaths = ORT_PATH; // served by scripts/serve.mjs, no CDN
  ort.env.wasm.numThreads = 1; // no SharedArrayBuffer: no cross-origin isolation needed
  ort.env.wasm.proxy = false;
  return ort;
}

async function loadBundle(bytes, name) {
  state.bundle = null;
  state.verifier = null;
  state.checker = null;
  state.clips = [];
  renderClips();
  ui.info.hidden = true;
  ui.enrollResult.textContent = "";
  ui.verifyResult.textContent = "";
  refresh();
  ui.status.textContent = `loading ${name}…`;
  let bundle;
  try {
    bundle = await uv.loadBundle(bytes, { name });
  } catch (error) {
    ui.status.textContent = "no bundle";
    throw error;
  }
  state.bundle = bundle;
  state.checker = await uv.Verifier.create({ ort: state.ort, bundle, store: new uv.MemoryStore() });
  showBundle(bundle);
  ui.status.textContent = `${name} loaded`;
  say(bundle.manifest.input.kind === "audio" ? "Bundle loaded. Enter a user and a passphrase, then record 5 clips." : "This is an image bundle: the page records voice only.");
}

function showBundle(bundle) {
  const m = bundle.manifest;
  $("b-name").textContent = m.name;
  const description = m.extra?.description ?? m.extra?.provenance?.description;
  $("b-desc").textContent = typeof description === "string" ? description : "—";
  $("b-method").textContent = `${m.method} (${m.outputKind}, ${m.dim}-d)`;
  $("b-training").textContent = trainingText(m);
  const input = m.input;
  $("b-input").textContent =
    input.kind === "audio"
      ? `audio, ${input.sampleRate} Hz, windows of ${input.windowSeconds} s every ${input.hopSeconds} s, at least ${input.minSeconds} s`
      : `image, ${input.height}×${input.width}×${input.channels}`;
  $("b-signed").textContent = bundle.signedBy ? `verified, key ${bundle.signedBy}` : "not checked (no trusted key given to this page)";
  showCalibration(m.calibration, m.outputKind);
  ui.info.hidden = false;
}

/** How the model was trained (the manifest's `training`, as `uvsdk info` says it): no secret. */
function trainingText(m) {
  const training = m.training;
  if (training === null) return "not stated";
  const privacy = training.privacy;
  const guarantee = privacy === null ? "without differential privacy" : uv.describePrivacy(privacy);
  let text = `${training.method}, ${guarantee}; enrolls by ${training.enrollment} by default`;
  if (privacy !== null && m.code !== null) {
    text += `. Codeword mode is bounded by the privacy guarantee: its EER cannot go below ${privacy.membershipEerFloor} here`;
  }
  return text;
}

const percent = (fraction) => `${(100 * fraction).toFixed(1)}%`;

/**
 * What the enrollment's expected rates mean, in one sentence: "About 1 in 100 attempts by someone
 * else would be accepted, and about 1 in 14 of your own attempts rejected (measured on 24 people
 * in 7 recording conditions; strangers recorded unlike them can be accepted far more often)." The
 * rates are the SDK's text ("0.01", "< 0.0005", ">= 0.100"); the last clause is what the figure
 * does not cover (docs/model-card.md: an unseen recording chain accepted 39 % at the stated 1 %).
 */
function expectedRates(far, frr, table) {
  const parse = (text) => {
    const [, bound = "", number] = /^(<=|>=|<|>)?\s*(.*)$/.exec(text);
    return { bound, value: Number(number) };
  };
  const word = { "": "about", "<": "fewer than", "<=": "at most", ">": "more than", ">=": "at least" };
  const rate = ({ bound, value }) =>
    !(value > 0) ? (bound.startsWith("<") || bound === "" ? "almost none" : "some") : `${word[bound] ?? "about"} ${oneIn(value)}`;
  const others = parse(far);
  let sentence = `${rate(others)} attempts by someone else would be accepted`;
  if (frr !== null) sentence += `, and ${rate(parse(frr))} of your own attempts rejected`;
  const conditions = table.conditions.length;
  const where =
    `measured on ${count(table.people)} people in ${conditions} recording condition${conditions === 1 ? "" : "s"}` +
    "; strangers recorded unlike them can be accepted far more often";
  return `${sentence[0].toUpperCase()}${sentence.slice(1)} (${where}).`;
}

/** The sentence from figures measured held out (the core's heldOutSentence, uvsdk's `uvsdk enroll` line). */
function heldOutRates(report) {
  const start = uv.heldOutSentence(report.heldOut, report.heldOutChains, report.heldOutSeconds);
  return `${start}; strangers recorded unlike them can be accepted far more often).`;
}

/**
 * The bundle's calibration: one line saying what it states at the FAR this page enrolls with
 * (calibrationSummary: "Stated false-accept rate: 1 in 100 (measured on 24 people)"), and under
 * it the rows and where they were measured.
 */
function showCalibration(calibration, outputKind) {
  const body = $("b-cal").querySelector("tbody");
  body.replaceChildren();
  const table = tableInUse(calibration, outputKind);
  $("b-cal-box").hidden = table === null;
  $("b-nocal").hidden = table !== null;
  if (table === null) return;
  const { used, text } = calibrationSummary(table, state.checker.far ?? uv.DEFAULT_FAR);
  for (const row of table.rows) {
    const tr = document.createElement("tr");
    if (row === used) tr.className = "in-use";
    const cells = [oneIn(row.far), row.frr === null ? "—" : percent(row.frr), row.threshold.toFixed(4)];
    for (const cell of cells) tr.append(Object.assign(document.createElement("td"), { textContent: cell }));
    body.append(tr);
  }
  $("b-cal-summary").textContent = text;
  const genuine = used?.frr != null ? ` and ${count(table.genuineTrials)} of the right person's (${percent(used.frr)} of them turned away at ${oneIn(used.far)})` : "";
  $("b-cal-detail").textContent =
    `Measured with ${count(table.impostorTrials)} tries of a voice against another person's template${genuine}. ` +
    (table.genuineTrials > 0
      ? "Your threshold is the bundle's at this rate; your own clips only tell whether they would pass it. "
      : "Your own threshold comes from your clips and is never below the bundle's. ") +
    `Data: ${calibration.data}`;
}

// -- the verifier -----------------------------------------------------------------------------

function currentUser() {
  const user = ui.user.value.trim();
  uv.checkUser(user); // UvsdkError with the rule when the name is not valid
  return user;
}

async function verifier() {
  const passphrase = ui.passphrase.value;
  if (!passphrase) throw new uv.KeyUnavailableError("no passphrase");
  if (state.verifier === null || state.passphrase !== passphrase) {
    state.store ??= await uv.IndexedDBStore.open("uvsdk");
    state.verifier = await uv.Verifier.create({
      ort: state.ort,
      bundle: state.bundle,
      store: state.store,
      passphrase,
    });
    state.passphrase = passphrase;
  }
  return state.verifier;
}

// -- recording ----------------------------------------------------------------------------------

async function record(what) {
  const rate = state.bundle.manifest.input.sampleRate;
  say(`Recording ${what}: speak now (${CLIP_SECONDS} s)…`);
  const started = performance.now();
  const clip = await microphone.record(CLIP_SECONDS, {
    onProgress: (fraction) => {
      ui.progress.style.width = `${Math.round(fraction * 100)}%`;
      const left = Math.max(0, CLIP_SECONDS - (performance.now() - started) / 1000);
      ui.message.textContent = `Recording ${what}: speak now… ${left.toFixed(1)} s`;
      progressed();
    },
  });
  say(`Processing ${what}…`);
  return resample(clip.samples, clip.sampleRate, rate);
}

const REASONS = {
  silent: "silent",
  too_short: "too short",
  clipped: "too loud (clipped)",
  out_of_range: "out of range",
  non_finite: "not valid audio",
};

function renderClips(extra = null) {
  if (extra) ui.clips.append(extra);
  else ui.clips.replaceChildren();
}

/** Whether a passphrase is given; without one, says `refusal` and the action does not start. */
function passphraseGiven(refusal = "Enter a passphrase first (it encrypts the template): nothing was recorded.") {
  const given = ui.passphrase.value !== "";
  ui.passphrase.setAttribute("aria-invalid", String(!given));
  if (!given) {
    ui.passphrase.focus();
    say(refusal, "error");
  }
  return given;
}

async function onRecord() {
  currentUser();
  if (!passphraseGiven()) return;
  const samples = await record(`clip ${state.clips.length + 1} of ${CLIPS}`);
  state.attempts += 1;
  const report = state.checker.checkSample(samples, { enrollment: true, name: `clip ${state.attempts}` });
  const li = document.createElement("li");
  li.dataset.testid = "clip";
  if (report.ok) {
    state.clips.push(samples);
    li.className = "good";
    li.textContent = `clip ${state.attempts}: ${report.seconds.toFixed(1)} s, OK`;
    say(state.clips.length < CLIPS ? `${state.clips.length} of ${CLIPS} clips: record the next one.` : `${CLIPS} clips: press Enroll.`);
  } else {
    li.className = "bad";
    li.textContent = `clip ${state.attempts}: ${REASONS[report.reason] ?? report.reason} — record again`;
    li.title = report.message;
    say(`Clip ${state.attempts} is not usable (${REASONS[report.reason] ?? report.reason}): record it again.`, "error");
  }
  renderClips(li);
}

async function onEnroll() {
  const user = currentUser();
  const v = await verifier();
  say("Enrolling (the key derivation takes a moment)…");
  let embedded = 0;
  const report = await v.enroll(state.clips, {
    user,
    onSample: () => say(`Enrolling: clip ${++embedded} of ${state.clips.length} done…`),
  });
  state.enrolled = true;
  state.reenroll = false;
  state.clips = [];
  state.attempts = 0;
  renderClips();
  const lines = [`Enrolled ${report.user} from ${report.used} clips (${report.mode} mode).`];
  const table = state.bundle.manifest.calibration?.tables[report.mode];
  if (report.heldOut) {
    lines.push(heldOutRates(report));
  } else if (report.far !== null && table) {
    lines.push(expectedRates(report.expectedFar, report.expectedFrr, table));
  } else {
    lines.push("No calibration row: the threshold comes from your own clips alone.");
  }
  lines.push(`${report.ownRejected} of your ${report.used} clips would be rejected by it.`);
  if (report.advice) lines.push(`Advice: ${report.advice}.`);
  ui.enrollResult.replaceChildren(...lines.map((text) => Object.assign(document.createElement("div"), { textContent: text })));
  say(`${report.user} is enrolled: try Verify.`);
}

async function onVerify() {
  ui.verifyResult.textContent = "";
  const user = currentUser();
  if (!passphraseGiven()) return;
  const v = await verifier();
  say("Opening the template…");
  // Before asking anyone to speak: the passphrase opens the template, the user is enrolled and
  // not locked out (verify checks all of this again, under the user's lock).
  const template = await v.templates.load(user);
  if (template.mode === null) throw new uv.NotEnrolledError("not enrolled");
  uv.check(template.backoff, user, v.clock());
  const samples = await record("your voice");
  const report = state.checker.checkSample(samples, { name: "the clip" });
  if (!report.ok) {
    say(`The clip is not usable (${REASONS[report.reason] ?? report.reason}): nothing was counted, try again.`, "error");
    return;
  }
  const decision = await v.verify(samples, { user });
  const word = decision.accepted ? "ACCEPT" : "REJECT";
  const big = Object.assign(document.createElement("div"), {
    className: `decision ${decision.accepted ? "accept" : "reject"}`,
    textContent: word,
  });
  big.dataset.testid = "decision";
  const margin = Object.assign(document.createElement("div"), { textContent: verdict(decision, template.mode, state.bundle.manifest.scoreNorm) });
  margin.dataset.testid = "margin";
  ui.verifyResult.replaceChildren(big, margin);
  say(decision.accepted ? `${user} verified.` : `Not ${user}, or not recognised: rejected.`, decision.accepted ? "info" : "error");
}

async function onDelete() {
  const user = currentUser();
  if (!passphraseGiven(`Enter ${user}'s passphrase to delete the template: nothing was deleted.`)) return;
  const v = await verifier();
  // The passphrase must open the template, so that nobody at this page deletes another's by
  // mistake; a template that opens for no one (damaged) can still be deleted, after the question.
  let damaged = null;
  try {
    await v.templates.load(user);
  } catch (error) {
    if (error instanceof uv.WrongKeyError) {
      say(`Wrong passphrase for ${user}'s template: nothing was deleted.`, "error");
      return;
    }
    if (!(error instanceof uv.TemplateError)) throw error; // not enrolled (any more): fail() says so
    damaged = explain(error, user);
  }
  const question =
    damaged === null
      ? `Delete ${user}'s template from this browser? This cannot be undone: ${user} would enroll again from ${CLIPS} new clips.`
      : `${damaged} Delete ${user}'s template from this browser?`;
  if (!confirm(question)) {
    say("Nothing was deleted.");
    return;
  }
  await v.delete(user);
  state.enrolled = false;
  state.reenroll = false;
  state.verifier = null;
  ui.enrollResult.textContent = "";
  ui.verifyResult.textContent = "";
  say(`${user}'s template was deleted.`);
}

// -- start --------------------------------------------------------------------------------------

ui.record.addEventListener("click", () => busy(onRecord));
ui.enroll.addEventListener("click", () => busy(onEnroll));
ui.verify.addEventListener("click", () => busy(onVerify));
ui.delete.addEventListener("click", () => busy(onDelete));
ui.reenroll.addEventListener("click", () => {
  state.reenroll = true;
  refresh();
  say(`Record ${CLIPS} new clips, then Enroll: it replaces ${ui.user.value.trim()}'s template.`);
});
addEventListener("pagehide", () => microphone.release());
$("who").addEventListener("submit", (event) => event.preventDefault());
ui.resetClips.addEventListener("click", () => {
  state.clips = [];
  state.attempts = 0;
  renderClips();
  refresh();
  say("Clips discarded.");
});
ui.user.addEventListener("change", () => {
  state.clips = [];
  state.attempts = 0;
  state.reenroll = false;
  renderClips();
  refresh();
});
ui.user.addEventListener("input", () => checkEnrolled());
ui.passphrase.addEventListener("input", () => ui.passphrase.removeAttribute("aria-invalid"));
ui.file.addEventListener("change", () => {
  const file = ui.file.files?.[0];
  if (file) busy(async () => loadBundle(new Uint8Array(await file.arrayBuffer()), file.name));
});

busy(async () => {
  state.ort = await loadOrt();
  const source = params.get("bundle") ?? "/bundles/default.uvb";
  const url = new URL(source, location.href);
  if (url.origin !== location.origin) throw new uv.BundleError(`${source}: only bundles from this server or a file`);
  const response = await fetch(url);
  if (!response.ok) {
    ui.status.textContent = "no bundle";
    throw new uv.BundleError(`${url.pathname}: ${response.status} ${response.statusText || "not found"}`);
  }
  await loadBundle(new Uint8Array(await response.arrayBuffer()), url.pathname.split("/").pop());
  await checkEnrolled();
}).finally(() => {
  document.body.dataset.ready = "1"; // the browser test waits for this
});
