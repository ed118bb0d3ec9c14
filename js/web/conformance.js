// Runs conformance/vectors/*.json in this browser (onnxruntime-web, WebCrypto) with the shared
// runner; ?only=media,model limits the files. The result is left in window.uvsdkConformance
// (read by js/test/browser/conformance.test.mjs) and shown as a table.
import * as uv from "../dist/src/browser.js";
import { FILES, runConformance } from "./conformance-runner.js";

const ORT_PATH = "/ort/";
const summary = document.getElementById("summary");
const body = document.getElementById("results");

async function readFile(path) {
  // paths are relative to conformance/, except the shipped default bundle (repository root)
  const url = path === "sdk/uvsdk/data/default.uvb" ? "/bundles/default.uvb" : `/conformance/${path}`;
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return new Uint8Array(await response.arrayBuffer());
}

function row(result) {
  const tr = document.createElement("tr");
  for (const text of [result.file, result.name, result.ok ? "pass" : `FAIL: ${result.message}`, String(result.ms)]) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  if (!result.ok) tr.style.color = "var(--bad)";
  body.append(tr);
}

try {
  const ort = await import(`${ORT_PATH}ort.wasm.min.mjs`);
  ort.env.wasm.wasmPaths = ORT_PATH;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  const only = new URLSearchParams(location.search).get("only")?.split(",").filter((f) => FILES.includes(f)) ?? FILES;
  const started = performance.now();
  const results = await runConformance({ uv, ort, readFile, only, onResult: row, sessionOptions: { executionProviders: ["wasm"] } });
  const failed = results.filter((r) => !r.ok).length;
  summary.textContent = `${results.length - failed} of ${results.length} vectors pass (${((performance.now() - started) / 1000).toFixed(1)} s, onnxruntime-web ${ort.env.versions?.web ?? ""})`;
  summary.className = `message ${failed ? "error" : "info"}`;
  window.uvsdkConformance = { results, userAgent: navigator.userAgent, ortVersion: ort.env.versions?.web ?? null };
} catch (error) {
  summary.textContent = `the run stopped: ${error?.message ?? error}`;
  summary.className = "message error";
  window.uvsdkConformance = { error: String(error?.stack ?? error) };
}
