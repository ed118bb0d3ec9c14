// The page (js/web/) end to end in Chromium with a fake microphone: Verify and Delete wait for a
// template, recording waits for a passphrase, the calibration line says what it states; enroll
// the owner from five recordings (then recording waits for "Enroll again"), verify the owner
// (ACCEPT, and how far above the threshold in one sentence); relaunch on the same profile
// (IndexedDB keeps the encrypted template) with a stranger as the microphone (REJECT); a wrong
// passphrase; delete, which takes the passphrase and a confirmation. Every wait lasts as long as
// the page shows progress (waitWhileProgressing), not a fixed time. Chromium: $CHROMIUM or /usr/bin/chromium (Debian's `chromium`); skipped without one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer } from "../../scripts/serve.mjs";
import { REPO, fakeMicArgs, gotoAndWait, launchPersistent, outputDir, skipOption, waitWhileProgressing, watch } from "./chromium.mjs";

const AUDIO = join(REPO, "conformance", "audio");
const SECONDS = 2; // per recording (?seconds=2): the test's recordings are real time
const PASSPHRASE = "correct horse battery staple";
const VIEWPORT = { width: 1280, height: 1000 };

/** 16-bit mono PCM WAV files of one speaker concatenated (the fake microphone's input). */
async function speakerWav(folder, speaker) {
  const parts = [];
  let rate = 0;
  for (let j = 0; j < 8; j++) {
    const bytes = await readFile(join(AUDIO, `speaker${speaker}-${j}.wav`));
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let offset = 12;
    let data = null;
    while (offset + 8 <= bytes.length) {
      const id = bytes.toString("latin1", offset, offset + 4);
      const size = view.getUint32(offset + 4, true);
      if (id === "fmt ") {
        assert.equal(view.getUint16(offset + 8, true), 1, "PCM");
        assert.equal(view.getUint16(offset + 10, true), 1, "mono");
        rate = view.getUint32(offset + 12, true);
        assert.equal(view.getUint16(offset + 22, true), 16, "16-bit");
      } else if (id === "data") data = bytes.subarray(offset + 8, offset + 8 + size);
      offset += 8 + size + (size & 1);
    }
    assert.ok(data, "data chunk");
    parts.push(data);
  }
  const pcm = Buffer.concat(parts);
  const header = Buffer.alloc(44);
  header.write("RIFF", 0, "latin1");
  header.writeUInt32LE(36 + pcm.length, 4);
  header.write("WAVEfmt ", 8, "latin1");
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write("data", 36, "latin1");
  header.writeUInt32LE(pcm.length, 40);
  const path = join(folder, `speaker${speaker}.wav`);
  await writeFile(path, Buffer.concat([header, pcm]));
  return path;
}

/** Width and height of a PNG (checking its signature and IHDR). */
function pngSize(bytes) {
  const signature = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  assert.deepEqual([...bytes.subarray(0, 8)], signature, "PNG signature");
  assert.equal(bytes.toString("latin1", 12, 16), "IHDR");
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

async function openPage(context, url) {
  const page = context.pages()[0] ?? (await context.newPage());
  const pageLog = watch(page);
  await gotoAndWait(page, url, "the page loads", () => document.body?.dataset.ready === "1");
  return { page, pageLog };
}

/** Wait, while the page progresses, until it is no longer busy (a recording, an enrollment, ...). */
const idle = (page, what = "the page finishes") => waitWhileProgressing(page, what, () => document.body.dataset.busy === "0");

/** Click a button and wait until the page has done what it started. */
async function press(page, testid) {
  await page.click(`[data-testid=${testid}]`);
  await idle(page, `${testid} finishes`);
}

/** Wait, while the page progresses, until the message line matches `pattern`. */
const messageMatches = (page, pattern) =>
  waitWhileProgressing(page, `a message matching ${pattern}`, ([source, flags]) => new RegExp(source, flags).test(document.querySelector("[data-testid=message]").textContent), [pattern.source, pattern.flags]);

const enabled = (page, testid) => page.isEnabled(`[data-testid=${testid}]`);

/**
 * The decision's sentence: how far above or below the user's threshold the clip scored, on the
 * cosine scale (the conformance bundle has no cohort); never the score or the threshold.
 */
const VERDICT = /^(Accepted|Rejected): this clip scored (\d+\.\d|0\.\d\d|less than 0\.01) (above|below) your threshold \(cosine scores run from −1 to 1\)\.$/;

async function verifyOnce(page) {
  await press(page, "verify");
  assert.ok(await page.$("[data-testid=decision]"), `no decision: ${await page.textContent("[data-testid=message]")}`);
  const decision = await page.textContent("[data-testid=decision]");
  const sentence = await page.textContent("[data-testid=margin]");
  const [, word, size, side] = VERDICT.exec(sentence) ?? assert.fail(`the decision's sentence: ${sentence}`);
  const distance = size === "less than 0.01" ? 0 : Number(size);
  assert.equal(word, decision === "ACCEPT" ? "Accepted" : "Rejected", sentence);
  assert.equal(side, decision === "ACCEPT" ? "above" : "below", sentence);
  return {
    decision,
    margin: (side === "above" ? 1 : -1) * distance,
    result: await page.textContent("[data-testid=verify-result]"),
    message: await page.textContent("[data-testid=message]"),
  };
}

/** Answer the page's next confirm() with `accept`; resolves to the question it asked. */
function answerNextDialog(page, accept) {
  return new Promise((resolve) =>
    page.once("dialog", async (dialog) => {
      assert.equal(dialog.type(), "confirm");
      const question = dialog.message();
      await (accept ? dialog.accept() : dialog.dismiss());
      resolve(question);
    }),
  );
}

test("the page: enroll from the fake microphone, ACCEPT the owner, REJECT a stranger, wrong passphrase, delete", { skip: skipOption() }, async (t) => {
  const folder = await mkdtemp(join(tmpdir(), "uvsdk-web-"));
  const server = await startServer({ port: 0 });
  const url = `${server.url}?bundle=/bundles/voice-embedding.uvb&seconds=${SECONDS}`;
  const logs = [];
  let context = null;
  t.after(async () => {
    await context?.close().catch(() => {});
    await server.close();
    await rm(folder, { recursive: true, force: true });
  });
  const diagnose = (what) => `${what}\n--- browser log ---\n${logs.flat().join("\n")}`;
  const ownerWav = await speakerWav(folder, 0);
  const stranger = await speakerWav(folder, 1);
  const profile = join(folder, "profile");

  // 1. the owner enrolls and verifies
  context = await launchPersistent(profile, fakeMicArgs(ownerWav), { viewport: VIEWPORT });
  let { page, pageLog } = await openPage(context, url);
  logs.push(pageLog);
  assert.equal(await page.textContent("[data-testid=bundle-name]"), "conformance-voice-embedding", diagnose("bundle name"));
  await page.screenshot({ path: join(outputDir(), "page-start.png") });
  // the calibration in a person's words: the FAR the page enrolls at (1 %), on how many people
  assert.equal(await page.textContent("[data-testid=calibration-summary]"), "Stated false-accept rate: 1 in 100 (measured on 24 people)");
  const rows = await page.$$eval("[data-testid=calibration] tbody tr", (trs) => trs.map((tr) => [tr.className, tr.firstChild.textContent]));
  assert.equal(rows.length, 7, "the bundle's seven rows");
  assert.deepEqual(rows.filter(([name]) => name === "in-use"), [["in-use", "1 in 100"]], "the row in use is marked");
  assert.match(await page.textContent("[data-testid=calibration-detail]"), /4,416 tries .* Data: 24 synthetic formant speakers/);
  // nobody enrolled yet: nothing to verify or delete
  await page.fill("[data-testid=user]", "alice");
  assert.equal(await enabled(page, "verify"), false, "Record and verify before any enrollment");
  assert.equal(await enabled(page, "delete"), false, "Delete template before any enrollment");
  assert.equal(await enabled(page, "record"), true);
  // no passphrase: nothing is recorded
  await press(page, "record");
  assert.equal(await page.textContent("[data-testid=message]"), "Enter a passphrase first (it encrypts the template): nothing was recorded.");
  assert.equal((await page.$$("[data-testid=clip]")).length, 0, "no clip recorded without a passphrase");
  assert.equal(await page.getAttribute("[data-testid=passphrase]", "aria-invalid"), "true");
  assert.equal(await page.textContent("[data-testid=verify-note]"), "alice has no template in this browser yet: enroll first.");
  await page.click("[data-testid=calibration-summary]"); // open the calibration's rows
  await page.screenshot({ path: join(outputDir(), "page-no-passphrase.png"), fullPage: true });
  await page.fill("[data-testid=passphrase]", PASSPHRASE);
  for (let i = 1; i <= 5; i++) {
    await press(page, "record");
    assert.equal((await page.$$("[data-testid=clip]")).length, i, diagnose(`clip ${i}: ${await page.textContent("[data-testid=message]")}`));
  }
  const clips = await page.$$eval("[data-testid=clip]", (items) => items.map((li) => li.textContent));
  for (const text of clips) assert.match(text, /^clip \d: \d\.\d s, OK$/, diagnose(`clip feedback: ${clips.join(" | ")}`));
  assert.equal(await page.isEnabled("[data-testid=record]"), false, "five clips: no more recording");
  await press(page, "enroll");
  const report = await page.textContent("[data-testid=enroll-result]");
  assert.match(report, /Enrolled alice from 5 clips \(prototype mode\)/, diagnose(`no enrollment: ${await page.textContent("[data-testid=message]")}`));
  // what the expected rates mean, in one sentence (the 1 % row's threshold is the user's)
  assert.match(report, /About 1 in 100 attempts by someone else would be accepted, and (about 1 in [\d,]+|almost none) of your own attempts rejected \(measured on 24 people in 1 recording condition; strangers recorded unlike them can be accepted far more often\)\./);
  assert.doesNotMatch(report, /floored|raised by the calibration/);
  // enrolled: recording again waits for "Enroll again" (no accidental re-enrollment)
  assert.equal(await enabled(page, "record"), false, "Record clip once enrolled");
  assert.equal(await enabled(page, "enroll"), false, "Enroll once enrolled");
  assert.equal(await page.textContent("[data-testid=enroll-note]"), "alice is enrolled. To replace the template, press Enroll again; to remove it, Delete template.");
  assert.equal(await enabled(page, "reenroll"), true, "Enroll again once enrolled");
  await page.click("[data-testid=reenroll]");
  assert.equal(await enabled(page, "record"), true, "Record clip after Enroll again");
  assert.equal(await page.textContent("[data-testid=record]"), "Record clip 1 of 5");
  assert.equal(await enabled(page, "reenroll"), false, "Enroll again, pressed");
  assert.equal(await page.textContent("[data-testid=enroll-note]"), "Enroll replaces alice's template (its passphrase must open it).");
  assert.equal(await enabled(page, "verify"), true, "Record and verify once enrolled");
  assert.equal(await enabled(page, "delete"), true, "Delete template once enrolled");
  assert.equal(await page.textContent("[data-testid=verify-note]"), "");
  // The owner may need a second try, as a person would: with five one-window clips of a very
  // consistent synthetic voice, the warm-up rule (target TPR 0.95) puts the user's threshold near
  // the lowest leave-one-out score, and one 2-s attempt falls below it about one time in seven
  // (simulated under Node with the same SDK: 11 of 80; three attempts in a row: 0 of 80). Two
  // rejections stay below the lock-out (5), and the acceptance resets the count.
  const owner = [];
  for (let attempt = 1; attempt <= 3 && owner.at(-1)?.decision !== "ACCEPT"; attempt++) owner.push(await verifyOnce(page));
  const accepted = owner.at(-1);
  t.diagnostic(`owner attempts: ${owner.map((o) => `${o.decision} ${o.margin}`).join(", ")}`);
  assert.equal(accepted.decision, "ACCEPT", diagnose(`owner: ${JSON.stringify(owner)}`));
  assert.equal(accepted.result, `ACCEPT${await page.textContent("[data-testid=margin]")}`, "the decision and its sentence, nothing else");
  await context.close();
  context = null;

  // 2. same profile, a stranger at the microphone
  context = await launchPersistent(profile, fakeMicArgs(stranger), { viewport: VIEWPORT });
  ({ page, pageLog } = await openPage(context, url.replace(`seconds=${SECONDS}`, "seconds=1"))); // short attempts
  logs.push(pageLog);
  // the template in IndexedDB is found when the page opens; another name has none
  assert.equal(await enabled(page, "verify"), true, "alice's template, found on opening");
  assert.equal(await enabled(page, "record"), false, "alice is enrolled: no recording on opening");
  await page.fill("[data-testid=user]", "bob");
  await waitWhileProgressing(page, "bob has no template", () => document.querySelector("[data-testid=verify]").disabled);
  assert.equal(await enabled(page, "delete"), false, "bob: nothing to delete");
  await page.fill("[data-testid=user]", "alice");
  await waitWhileProgressing(page, "alice has a template", () => !document.querySelector("[data-testid=verify]").disabled);
  // no passphrase: the verification records nothing
  await press(page, "verify");
  assert.equal(await page.textContent("[data-testid=message]"), "Enter a passphrase first (it encrypts the template): nothing was recorded.");
  assert.equal(await page.$("[data-testid=decision]"), null, "no decision without a passphrase");
  await page.fill("[data-testid=passphrase]", PASSPHRASE);
  const rejected = await verifyOnce(page);
  assert.equal(rejected.decision, "REJECT", diagnose(`stranger: ${JSON.stringify(rejected)}`));
  assert.ok(rejected.margin < 0 && rejected.margin < accepted.margin, `stranger ${rejected.margin} < owner ${accepted.margin}`);
  t.diagnostic(`owner ${accepted.margin} above the threshold, stranger ${-rejected.margin} below`);
  await page.screenshot({ path: join(outputDir(), "page-reject.png") });

  // the back-off: four more rejections make five in a row, then the page refuses before recording
  for (let i = 2; i <= 5; i++) assert.equal((await verifyOnce(page)).decision, "REJECT", `stranger attempt ${i}`);
  await press(page, "verify");
  assert.match(await page.textContent("[data-testid=message]"), /^Locked out after too many failed attempts: try again in \d+ s \(at .+\)\.$/);

  // 3. a wrong passphrase: refused before anything is recorded
  await page.fill("[data-testid=passphrase]", "not the passphrase");
  await press(page, "verify");
  assert.equal(await page.textContent("[data-testid=message]"), "Wrong passphrase for alice's template.");

  // delete takes the template's passphrase and a confirmation: none, a wrong one, or "Cancel"
  // delete nothing (a confirm() left unanswered would stop the page: every dialog is answered)
  let asked = 0;
  const counted = (dialog) => {
    asked += 1;
    return dialog.dismiss();
  };
  page.on("dialog", counted);
  await page.fill("[data-testid=passphrase]", "");
  await press(page, "delete");
  assert.equal(await page.textContent("[data-testid=message]"), "Enter alice's passphrase to delete the template: nothing was deleted.");
  await page.fill("[data-testid=passphrase]", "not the passphrase");
  await press(page, "delete");
  assert.equal(await page.textContent("[data-testid=message]"), "Wrong passphrase for alice's template: nothing was deleted.");
  assert.equal(asked, 0, "no question before the passphrase opens the template");
  page.off("dialog", counted);
  await page.fill("[data-testid=passphrase]", PASSPHRASE);
  const cancelled = answerNextDialog(page, false);
  await press(page, "delete");
  assert.equal(await cancelled, "Delete alice's template from this browser? This cannot be undone: alice would enroll again from 5 new clips.");
  assert.equal(await page.textContent("[data-testid=message]"), "Nothing was deleted.");
  assert.equal(await enabled(page, "delete"), true, "the template is still there");

  // a tampered template (the GCM tag's last byte flipped in IndexedDB): refused with one line
  await page.fill("[data-testid=passphrase]", PASSPHRASE);
  await page.evaluate(async () => {
    const db = await new Promise((resolve, reject) => {
      const req = indexedDB.open("uvsdk");
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
    const store = db.transaction("templates", "readwrite").objectStore("templates");
    const bytes = await new Promise((resolve) => (store.get("alice").onsuccess = (e) => resolve(e.target.result)));
    bytes[bytes.length - 1] ^= 1;
    await new Promise((resolve) => (store.put(bytes, "alice").onsuccess = resolve));
    db.close();
  });
  await press(page, "verify");
  assert.match(await page.textContent("[data-testid=message]"), /^Template refused: it was modified or is damaged \(.*\)\.$/);

  // delete (a damaged template is deleted too, after its question); then nothing is left to
  // verify or delete, and recording is open again
  const confirmed = answerNextDialog(page, true);
  await press(page, "delete");
  assert.match(await confirmed, /^Template refused: it was modified or is damaged \(.*\)\. Delete alice's template from this browser\?$/);
  assert.equal(await page.textContent("[data-testid=message]"), "alice's template was deleted.");
  assert.equal(await enabled(page, "record"), true, "Record clip after the delete");
  assert.equal(await page.textContent("[data-testid=enroll-note]"), "");
  assert.equal(await enabled(page, "verify"), false, "Record and verify after the delete");
  assert.equal(await enabled(page, "delete"), false, "Delete template after the delete");

  // a bad bundle from the file picker
  await page.setInputFiles("[data-testid=bundle-file]", { name: "broken.uvb", mimeType: "application/octet-stream", buffer: Buffer.from("not a zip") });
  await messageMatches(page, /Bad bundle/);
  assert.match(await page.textContent("[data-testid=message]"), /^Bad bundle: /);
  assert.equal(await page.isEnabled("[data-testid=verify]"), false, "no bundle, no verification");

  // nothing secret on the page: the user's threshold or prototype never appears
  const text = await page.textContent("main");
  assert.doesNotMatch(text, /prototype [0-9A-Za-z+/]{20,}|threshold [0-9.]+ /i);
  assert.ok(logs.flat().every((line) => !/threshold|prototype|codeword/i.test(line)), diagnose("the console mentions a secret"));
  // no script error, no request refused or failed, no Content-Security-Policy violation (no CDN)
  const problems = logs.flat().filter((line) => /^pageerror|^requestfailed|^http [45]\d\d|Refused to|Content Security Policy/.test(line));
  assert.deepEqual(problems, [], diagnose("problems in the browser log"));

  const shot = join(outputDir(), "page.png");
  await page.screenshot({ path: shot });
  const size = pngSize(await readFile(shot));
  assert.deepEqual(size, VIEWPORT, "screenshot of the viewport");
});
