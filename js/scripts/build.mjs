#!/usr/bin/env node
// npm run build: TypeScript's compiler (tsc -p tsconfig.json: src/ and test/ into dist/), with one
// line before it, since tsc prints nothing until it is done (tens of seconds on a loaded machine),
// and one after saying how long it took. tsc's errors and exit status pass through unchanged.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const JS = fileURLToPath(new URL("..", import.meta.url));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

console.log("build: tsc compiles src/ and test/ into dist/ (it prints nothing until it is done)…");
const started = performance.now();
const { status, signal, error } = spawnSync(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: JS, stdio: "inherit" });
if (status !== 0) {
  console.error(`build: tsc failed (${error?.message ?? signal ?? `exit ${status}`})`);
  process.exit(status || 1);
}
console.log(`build: dist/ written in ${Math.round((performance.now() - started) / 1000)} s`);
