// Without Chromium the browser tests (test/browser/) are skipped, each with one line saying why and
// how to get one; with UVSDK_REQUIRE_BROWSER=1 (what CI sets) they fail instead. Runs them in a
// child `node --test` with CHROMIUM naming a file that does not exist, so it holds whether or not
// this machine has a Chromium (no browser is started).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const JS = fileURLToPath(new URL("..", import.meta.url));
const MISSING = "/nonexistent/uvsdk-test/chromium";
const WHY = `no Chromium at ${MISSING} (install the distribution's package, apt install chromium, or set CHROMIUM=/path/to/chromium)`;
const TESTS = ["resample 48 kHz -> 16 kHz in Chromium is band-limited", "conformance vectors in Chromium (onnxruntime-web)"];

/** `node --test` on the browser tests with `env` added; resolves to its exit code and output (TAP). */
function runBrowserTests(env) {
  const childEnv = { ...process.env };
  delete childEnv.NODE_TEST_CONTEXT; // set by the runner running this file: the child is a runner of its own
  delete childEnv.UVSDK_REQUIRE_BROWSER; // CI sets it
  Object.assign(childEnv, { CHROMIUM: MISSING }, env);
  const child = spawn(process.execPath, ["--test", "--test-reporter=tap", "test/browser/"], { cwd: JS, env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout.on("data", (d) => (output += d));
  child.stderr.on("data", (d) => (output += d));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, output })));
}

test("no Chromium: the browser tests are skipped, each with one line saying why", async () => {
  const { code, output } = await runBrowserTests({});
  assert.equal(code, 0, output);
  const skipped = output.split("\n").filter((line) => /^ok \d+ - .* # SKIP /.test(line));
  assert.equal(skipped.length, 3, output);
  for (const line of skipped) assert.match(line, new RegExp(`# SKIP ${escape(WHY)}; UVSDK_REQUIRE_BROWSER=1 makes this a failure$`));
  for (const name of TESTS) assert.ok(skipped.some((line) => line.includes(` - ${name} # SKIP`)), `${name} skipped`);
  assert.match(output, /^# fail 0$/m);
  assert.match(output, /^# skipped 3$/m);
});

test("no Chromium with UVSDK_REQUIRE_BROWSER=1: the browser tests fail, naming what is missing", async () => {
  const { code, output } = await runBrowserTests({ UVSDK_REQUIRE_BROWSER: "1" });
  assert.equal(code, 1, output);
  assert.doesNotMatch(output, /# SKIP/);
  assert.match(output, /^# fail 3$/m);
  assert.match(output, new RegExp(`${escape(WHY)}; UVSDK_REQUIRE_BROWSER=1 is set, so this fails rather than skips`));
});

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
