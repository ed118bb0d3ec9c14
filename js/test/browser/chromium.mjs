// Shared by the browser tests: find Chromium (Debian's `chromium`, or $CHROMIUM), launch it with
// playwright-core, serve the page (scripts/serve.mjs) on a free port, and wait on a page's
// progress rather than on a clock (waitWhileProgressing). playwright-core starts Chromium in a
// process group of its own and kills that group when the browser is closed or this process ends.
//
// Without Chromium the tests are skipped, each with one line saying why and how to get one;
// with UVSDK_REQUIRE_BROWSER=1 (CI: .ci/run) a missing Chromium fails them instead.
import { accessSync, constants, mkdirSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const JS = fileURLToPath(new URL("../../", import.meta.url));
export const REPO = fileURLToPath(new URL("../../../", import.meta.url));
export const OUTPUT = fileURLToPath(new URL("../../test-output/", import.meta.url));
export const EXECUTABLE = process.env.CHROMIUM || "/usr/bin/chromium";
/** UVSDK_REQUIRE_BROWSER=1: a missing Chromium fails the browser tests rather than skipping them. */
export const REQUIRED = process.env.UVSDK_REQUIRE_BROWSER === "1";

/** Why Chromium cannot be run from here, or null when it can. */
function missing() {
  try {
    accessSync(EXECUTABLE, constants.X_OK);
    return null;
  } catch {
    return `no Chromium at ${EXECUTABLE} (install the distribution's package, apt install chromium, or set CHROMIUM=/path/to/chromium)`;
  }
}

/**
 * `{skip}` option for node:test: the one line saying why when Chromium is missing, else false; with
 * UVSDK_REQUIRE_BROWSER=1 always false (a missing Chromium then fails in requireChromium).
 */
export function skipOption() {
  const why = missing();
  return why === null || REQUIRED ? false : `${why}; UVSDK_REQUIRE_BROWSER=1 makes this a failure`;
}

/** Throws a clear error when the browser cannot be run. */
export function requireChromium() {
  const why = missing();
  if (why !== null) throw new Error(`${why}; UVSDK_REQUIRE_BROWSER=1 is set, so this fails rather than skips`);
}

export const BASE_ARGS = [
  "--no-sandbox", // containers and CI runners often lack the user namespaces Chromium's sandbox needs
  "--disable-dev-shm-usage",
  "--no-first-run",
  "--no-default-browser-check",
  "--disable-background-networking",
  "--disable-component-update",
  "--autoplay-policy=no-user-gesture-required",
];

/** Arguments that make a WAV file (16-bit PCM) the microphone, with no permission prompt. */
export const fakeMicArgs = (wav) => [
  "--use-fake-ui-for-media-stream",
  "--use-fake-device-for-media-stream",
  // Chromium loops the file; a "%noloop" suffix would stop that, but then the fake device goes
  // on with a quiet synthetic signal rather than silence, so the tests use long enough files.
  `--use-file-for-fake-audio-capture=${wav}`,
];

export function launch(args = []) {
  requireChromium();
  return chromium.launch({ executablePath: EXECUTABLE, headless: true, args: [...BASE_ARGS, ...args] });
}

export function launchPersistent(userDataDir, args = [], options = {}) {
  requireChromium();
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: EXECUTABLE,
    headless: true,
    args: [...BASE_ARGS, ...args],
    ...options,
  });
}

/** Collect what a page says on its console and the errors it throws (printed when a test fails). */
export function watch(page) {
  const log = [];
  page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  page.on("requestfailed", (r) => log.push(`requestfailed: ${r.url()} ${r.failure()?.errorText ?? ""}`));
  page.on("response", (r) => {
    if (r.status() >= 400) log.push(`http ${r.status()}: ${r.url()}`);
  });
  return log;
}

export function outputDir() {
  mkdirSync(OUTPUT, { recursive: true });
  return OUTPUT;
}

// The local server on a free port and a headless Chromium, both closed when the test `t` ends.
export async function serveAndLaunch(t) {
  const { startServer } = await import("../../scripts/serve.mjs");
  const server = await startServer({ port: 0 });
  let browser = null;
  t.after(async () => {
    await browser?.close();
    await server.close();
  });
  browser = await launch();
  return { server, browser };
}

/** Seconds a page may show no progress at all before a wait fails (the wait itself has no limit). */
export const STALL_SECONDS = 120;
const POLL_MS = 100;

/**
 * What the page (js/web/) shows that changes as it works: its step counter (`body[data-progress]`:
 * messages, recording ticks, clips embedded), its ready state and its message line. The
 * conformance page's counterpart is its rows of results and its summary line.
 */
export const pageProgress = () =>
  [
    document.readyState,
    document.body?.dataset.progress,
    document.querySelector("[data-testid=message]")?.textContent,
    document.querySelectorAll("[data-testid=results] tr").length,
    document.querySelector("[data-testid=summary]")?.textContent,
  ].join("|");

/**
 * Wait until `condition(arg)`, run in the page, is true, for as long as the page shows progress:
 * fails (naming `what`, with the page's last progress) only when `progress`, run in the page, has
 * returned the same thing for `stallSeconds` in a row. Under load the page is slow, not stuck.
 */
export async function waitWhileProgressing(page, what, condition, arg, { progress = pageProgress, stallSeconds = STALL_SECONDS } = {}) {
  let last = null;
  let since = Date.now();
  for (;;) {
    let now;
    try {
      if (await page.evaluate(condition, arg)) return;
      now = await page.evaluate(progress);
    } catch (error) {
      if (!/Execution context was destroyed|navigat/i.test(error.message)) throw error;
      now = `navigating ${Date.now()}`; // a new document is loading: that is progress
    }
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since > stallSeconds * 1000) {
      throw new Error(`${what}: the page showed no progress for ${stallSeconds} s (last: ${JSON.stringify(now)})`);
    }
    await sleep(POLL_MS);
  }
}

/** Open `url` (no navigation time limit) and wait, while it progresses, until `condition` holds. */
export async function gotoAndWait(page, url, what, condition, arg) {
  await page.goto(url, { waitUntil: "commit", timeout: 0 });
  await waitWhileProgressing(page, what, condition, arg);
}
