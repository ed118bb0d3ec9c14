// scripts/serve.mjs: 127.0.0.1 only, the fixed mounts, MIME types (application/wasm), no
// directory listing, no path traversal (raw, percent-encoded, double-encoded, backslashes, NUL,
// dot files), GET/HEAD only, --port 0 prints the URL; a port in use is one line naming --port; killing `npm run serve` stops the server.
// Every process a test starts runs in its own process group, and the whole group is killed when
// the test ends.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { createServer as createNetServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { mkdtemp, readFile, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openServed, startServer, resolvePath } from "../scripts/serve.mjs";

const JS = fileURLToPath(new URL("..", import.meta.url));
const SCRIPT = fileURLToPath(new URL("../scripts/serve.mjs", import.meta.url));
/** Checks of a process's state, 50 ms apart, before a test gives up (the server checks its parent every 250 ms). */
const POLLS = 1200;

/** Start `command` in a process group of its own, killed (all of it) when the test `t` ends. */
function spawnGroup(t, command, args, options = {}) {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], detached: true, ...options });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  t.after(async () => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // the group is gone already
    }
    await exited;
  });
  return { child, exited };
}

/** The URL the server prints; rejects when the process ends first. */
function printedUrl(child) {
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = /http:\/\/127\.0\.0\.1:(\d+)\/web\//.exec(out);
      if (m) resolve(m[0]);
    });
    child.stderr.on("data", (d) => (out += d));
    child.on("exit", (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

/** A live (not zombie) process's command line, or null (Linux /proc). */
function commandLine(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) return null;
    return readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0").join(" ").trim();
  } catch {
    return null;
  }
}

/** The ids of the processes in process group `group` (Linux /proc). */
function groupMembers(group) {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
        return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]) === group;
      } catch {
        return false; // ended meanwhile
      }
    })
    .map(Number);
}

/** Check `done()` up to POLLS times; true as soon as it holds. */
async function pollUntil(done) {
  for (let i = 0; i < POLLS; i++) {
    if (done()) return true;
    await sleep(50);
  }
  return done();
}

/** As pollUntil, for a check that is itself asynchronous. */
async function pollUntilAsync(done) {
  for (let i = 0; i < POLLS; i++) {
    if (await done()) return true;
    await sleep(50);
  }
  return done();
}

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

test("serve.mjs --port 0 prints the URL; a bad --port is refused", async (t) => {
  const { child, exited } = spawnGroup(t, process.execPath, [SCRIPT, "--port", "0"]);
  const port = Number(new URL(await printedUrl(child)).port);
  assert.ok(port > 0);
  assert.equal((await get(port, "/web/index.html")).status, 200);
  child.kill("SIGTERM");
  assert.deepEqual(await exited, { code: 0, signal: null }, "SIGTERM: the server exits");
  const bad = spawnGroup(t, process.execPath, [SCRIPT, "--port", "http"]);
  assert.equal((await bad.exited).code, 2);
});

/** All of a process's output and how it ended. */
async function ran({ child, exited }) {
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const { code } = await exited;
  return { code, stdout, stderr };
}

test("a port in use: one line naming the port and --port, exit 2 (node and npm run serve)", async (t) => {
  const taken = createNetServer();
  await new Promise((resolve, reject) => taken.once("error", reject).listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((done) => taken.close(done)));
  const port = String(taken.address().port);
  const [npm, prefix] = npmCommand();
  for (const [command, args, options] of [
    [process.execPath, [SCRIPT, "--port", port], {}],
    [npm, [...prefix, "run", "serve", "--", "--port", port], { cwd: JS }],
  ]) {
    const { code, stdout, stderr } = await ran(spawnGroup(t, command, args, options));
    assert.equal(code, 2, `${command}: ${stdout}${stderr}`);
    assert.equal(
      stderr,
      `serve.mjs: port ${port} on 127.0.0.1 is in use (another server, or this one already running?): ` +
        "choose another with --port N (--port 0: any free port)\n",
      "one line, no stack trace",
    );
    assert.doesNotMatch(stdout, /uvsdk page:|Error|at /, "nothing served, no trace on stdout");
  }
});

/** npm itself: the one running this test (npm test), else the npm on PATH. */
function npmCommand() {
  const cli = process.env.npm_execpath;
  return cli && /npm-cli\.js$/.test(cli) ? [process.execPath, [cli]] : ["npm", []];
}

// `kill <npm's pid>` (SIGTERM to npm alone: npm passes it to its `sh -c`, which ends without passing
// it on) and Ctrl-C (SIGINT to the whole foreground process group). A SIGINT to npm alone ends
// nothing: the shell waits for the server, npm waits for the shell.
const KILLS = [
  { signal: "SIGTERM", target: "npm", to: (group) => group },
  { signal: "SIGINT", target: "its process group (Ctrl-C)", to: (group) => -group },
];

for (const { signal, target, to } of KILLS) {
  test(`killing npm run serve (${signal} to ${target}) stops the server and frees its port`, { skip: existsSync("/proc/self/stat") ? false : "needs Linux /proc" }, async (t) => {
    const [npm, prefix] = npmCommand();
    const { child, exited } = spawnGroup(t, npm, [...prefix, "run", "serve", "--", "--port", "0"], { cwd: JS });
    const port = Number(new URL(await printedUrl(child)).port);
    const isServer = (pid) => /^\S*node\S* \S*scripts\/serve\.mjs/.test(commandLine(pid) ?? "");
    const servers = groupMembers(child.pid).filter(isServer);
    assert.equal(servers.length, 1, `one node server under npm: ${groupMembers(child.pid).map(commandLine).join(" | ")}`);
    const [server] = servers;
    process.kill(to(child.pid), signal);
    await exited;
    assert.ok(await pollUntil(() => commandLine(server) === null), `the server (process ${server}) still runs after npm ended`);
    // the port is freed: a new server can listen on it. Not at once: /proc shows node's main thread
    // ended (a zombie) while its other threads, which share the listening socket, may still be
    // ending, so a listen right then can meet EADDRINUSE (seen in CI on a busy machine).
    let again = null;
    assert.ok(
      await pollUntilAsync(async () => {
        again = await startServer({ port }).catch((error) => {
          if (error.code !== "EADDRINUSE") throw error;
          return null;
        });
        return again !== null;
      }),
      `port ${port} is still in use after the server ended`,
    );
    await again.close();
  });
}

test("serve.mjs reads the file it checked: a symbolic link swapped after the check serves nothing outside", async (t) => {
  const outside = await mkdtemp(join(tmpdir(), "uvsdk-serve-"));
  const secret = join(outside, "secret.js");
  await writeFile(secret, "outside the served folders\n");
  const inside = join(JS, "dist", "src", "index.js");
  const link = join(JS, "dist", `swapped-${process.pid}.js`);
  t.after(() => Promise.all([unlink(link).catch(() => undefined), rm(outside, { recursive: true })]));
  await symlink(inside, link);
  assert.equal(resolvePath(`/dist/swapped-${process.pid}.js`), link);
  const opened = await openServed(link); // the check passes: the link points inside
  assert.ok(opened);
  await unlink(link);
  await symlink(secret, link); // the attack: the link swapped between the check and the read
  try {
    const served = await opened.handle.readFile("utf8");
    assert.equal(served, await readFile(inside, "utf8"));
  } finally {
    await opened.handle.close();
  }
  assert.equal(await openServed(link), null, "a link pointing outside is refused");
});
