// scripts/serve.mjs: 127.0.0.1 only, the fixed mounts, MIME types (application/wasm), no
// directory listing, no path traversal (raw, percent-encoded, double-encoded, backslashes, NUL,
// dot files), GET/HEAD only, --port 0 prints the URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { request } from "node:http";
import { fileURLToPath } from "node:url";
import { startServer, resolvePath } from "../scripts/serve.mjs";

/** A raw request (the path is sent as given: no client-side normalisation of "..", unlike fetch). */
function get(port, path, method = "GET") {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, method }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on("error", reject);
    req.end();
  });
}

test("serve.mjs: files, MIME types, listing, traversal", async (t) => {
  const server = await startServer({ port: 0 });
  t.after(() => server.close());
  assert.equal(server.server.address().address, "127.0.0.1");
  const port = server.port;
  const ok = async (path, type) => {
    const res = await get(port, path);
    assert.equal(res.status, 200, path);
    assert.equal(res.headers["content-type"], type, path);
    assert.equal(res.headers["x-content-type-options"], "nosniff");
    return res;
  };
  await ok("/web/", "text/html; charset=utf-8");
  await ok("/web/index.html", "text/html; charset=utf-8");
  await ok("/web/app.js", "text/javascript; charset=utf-8");
  await ok("/web/style.css", "text/css; charset=utf-8");
  await ok("/ort/ort.wasm.min.mjs", "text/javascript; charset=utf-8");
  const wasm = await ok("/ort/ort-wasm-simd-threaded.wasm", "application/wasm");
  assert.deepEqual([...wasm.body.subarray(0, 4)], [0, 0x61, 0x73, 0x6d], "wasm magic");
  await ok("/node_modules/@noble/hashes/sha2.js", "text/javascript; charset=utf-8");
  await ok("/node_modules/fflate/esm/browser.js", "text/javascript; charset=utf-8");
  const uvb = await ok("/bundles/default.uvb", "application/octet-stream");
  assert.equal(uvb.body.toString("latin1", 0, 2), "PK");
  await ok("/bundles/voice-embedding.uvb", "application/octet-stream");
  await ok("/conformance/vectors/media.json", "application/json; charset=utf-8");
  await ok("/conformance/audio/speaker0-0.wav", "audio/wav");
  if ((await get(port, "/dist/src/index.js")).status === 200) await ok("/dist/src/index.js", "text/javascript; charset=utf-8");

  const head = await get(port, "/web/index.html", "HEAD");
  assert.equal(head.status, 200);
  assert.equal(head.body.length, 0);
  assert.equal((await get(port, "/web/index.html", "POST")).status, 405);
  const root = await get(port, "/");
  assert.equal(root.status, 302);
  assert.equal(root.headers.location, "/web/");

  const refused = [
    // directories: no listing
    "/dist/", "/dist/src/", "/ort/", "/conformance/", "/conformance/audio/", "/bundles/", "/node_modules/",
    // unknown places and types
    "/package.json", "/js/package.json", "/conformance/generate.py", "/conformance/README.md", "/bundles/nope.uvb",
    "/bundles/../../sdk/uvsdk/data/default.uvb", "/bundles/x.onnx",
    // traversal, raw and encoded
    "/web/../package.json", "/web/../../docs/spec.md", "/web/%2e%2e/package.json", "/web/%2e%2e%2fpackage.json",
    "/web/..%2f..%2fdocs%2fspec.md", "/web/%252e%252e/package.json", "/web/..\\package.json", "/web/%5c..%5cpackage.json",
    "/conformance/../sdk/uvsdk/data/default.uvb", "/conformance/%2e%2e/docs/spec.md", "/dist/../../.git/config",
    "/ort/../../package.json", "/ort/../package.json", "/web/index.html%00.js", "/web/%00", "/web/%zz",
    "//etc/passwd", "/web//etc/passwd", "/web/.hidden.js", "/conformance/.git/config",
  ];
  for (const path of refused) {
    const res = await get(port, path);
    assert.equal(res.status, 404, `${path}: ${res.status}`);
    assert.equal(res.body.toString(), "not found\n", path);
  }
  // resolvePath directly: every answer stays inside a served folder
  assert.equal(resolvePath("/web/../../etc/passwd"), null);
  assert.equal(resolvePath("/%2e%2e/etc/passwd"), null);
});

test("serve.mjs --port 0 prints the URL; a bad --port is refused", async () => {
  const script = fileURLToPath(new URL("../scripts/serve.mjs", import.meta.url));
  const child = spawn(process.execPath, [script, "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
        const m = /http:\/\/127\.0\.0\.1:(\d+)\/web\//.exec(out);
        if (m) resolve(m[0]);
      });
      child.on("exit", (code) => reject(new Error(`exited ${code}: ${out}`)));
    });
    const port = Number(new URL(url).port);
    assert.ok(port > 0);
    assert.equal((await get(port, "/web/index.html")).status, 200);
  } finally {
    child.kill();
  }
  const bad = spawn(process.execPath, [script, "--port", "http"], { stdio: ["ignore", "pipe", "pipe"] });
  const code = await new Promise((resolve) => bad.on("exit", resolve));
  assert.equal(code, 2);
});
