// Shared by the browser tests: find Chromium (Debian's `chromium`, or $CHROMIUM), launch it with
// playwright-core, and serve the page (scripts/serve.mjs) on a free port.
//
// Without Chromium the tests FAIL, unless UVSDK_SKIP_BROWSER=1 is set (then they skip).
import { accessSync, constants, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const JS = fileURLToPath(new URL("../../", import.meta.url));
export const REPO = fileURLToPath(new URL("../../../", import.meta.url));
export const OUTPUT = fileURLToPath(new URL("../../test-output/", import.meta.url));
export const EXECUTABLE = process.env.CHROMIUM || "/usr/bin/chromium";
export const SKIP = process.env.UVSDK_SKIP_BROWSER === "1";

/** `{skip}` options for node:test: a reason when UVSDK_SKIP_BROWSER=1, else false (a missing Chromium then fails). */
export const skipOption = () => (SKIP ? "UVSDK_SKIP_BROWSER=1" : false);

/** Throws a clear error when the browser cannot be run. */
export function requireChromium() {
  try {
    accessSync(EXECUTABLE, constants.X_OK);
  } catch {
    throw new Error(
      `Chromium not found at ${EXECUTABLE}: install it (apt-get install chromium) or set CHROMIUM=/path/to/chrome; ` +
        "UVSDK_SKIP_BROWSER=1 skips the browser tests",
    );
  }
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
