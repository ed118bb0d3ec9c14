#!/usr/bin/env node
// A small local web server for the uvsdk browser page (js/web/) and the browser tests.
// Node's http only; binds 127.0.0.1 (a secure context: WebCrypto and getUserMedia work over
// plain http there). Serves a fixed set of folders, never lists a directory, refuses paths that
// leave their folder, and answers only for known file types.
//
//   node scripts/serve.mjs [--port 8765]      (--port 0: any free port; the URL is printed)
//
// It stops on SIGINT, SIGTERM or SIGHUP, and when the process that started it ends: `npm run
// serve` runs it under `sh -c`, and a SIGTERM or SIGINT sent to npm alone reaches that shell,
// which ends without passing it on, so the server would otherwise go on holding its port.
//
//   /                      -> redirect to /web/
//   /web/...               -> js/web/                  (index.html, app.js, ...)
//   /dist/...              -> js/dist/                 (the compiled package: npm run build)
//   /ort/...               -> node_modules/onnxruntime-web/dist/  (ESM build and its .wasm)
//   /node_modules/@noble/hashes/..., /node_modules/fflate/esm/...  (the package's dependencies)
//   /bundles/default.uvb   -> ../sdk/uvsdk/data/default.uvb
//   /bundles/<name>.uvb    -> ../conformance/bundles/<name>.uvb
//   /conformance/...       -> ../conformance/  (vectors, audio, bundles, keys: the browser conformance run)
import { createServer } from "node:http";
import { constants, promises as fs } from "node:fs";
import { pipeline } from "node:stream";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const JS = path.resolve(fileURLToPath(new URL("..", import.meta.url)));
const REPO = path.dirname(JS);

export const MIME = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".wasm": "application/wasm",
  ".uvb": "application/octet-stream",
  ".wav": "audio/wav",
  ".png": "image/png",
  ".svg": "image/svg+xml",
  ".pem": "text/plain; charset=utf-8",
  ".hex": "text/plain; charset=utf-8",
  ".txt": "text/plain; charset=utf-8",
};

/** URL prefix -> folder on disk (and the file types served from it). */
const MOUNTS = [
  ["/web/", path.join(JS, "web")],
  ["/dist/", path.join(JS, "dist")],
  ["/ort/", path.join(JS, "node_modules", "onnxruntime-web", "dist")],
  ["/node_modules/@noble/hashes/", path.join(JS, "node_modules", "@noble", "hashes")],
  ["/node_modules/fflate/esm/", path.join(JS, "node_modules", "fflate", "esm")],
  ["/conformance/", path.join(REPO, "conformance")],
];
const BUNDLES = path.join(REPO, "conformance", "bundles");
const DEFAULT_BUNDLE = path.join(REPO, "sdk", "uvsdk", "data", "default.uvb");

const HEADERS = {
  "X-Content-Type-Options": "nosniff",
  "Cache-Control": "no-store",
  "Referrer-Policy": "no-referrer",
  // Everything comes from this server: no CDN, no other origin. ('unsafe-inline' for the
  // import map; 'wasm-unsafe-eval' for onnxruntime-web's WebAssembly.)
  "Content-Security-Policy":
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'wasm-unsafe-eval'; style-src 'self'; " +
    "img-src 'self' data:; media-src 'self' blob:; connect-src 'self'; worker-src 'self' blob:; " +
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

/**
 * The file a URL path names, or null (404). `urlPath` is the raw path (no query); it is decoded
 * once, and must not contain NUL, backslashes, or a `.`/`..`/dot-file segment.
 */
export function resolvePath(urlPath) {
  let decoded;
  try {
    decoded = decodeURIComponent(urlPath);
  } catch {
    return null;
  }
  if (!decoded.startsWith("/") || decoded.includes("\0") || decoded.includes("\\")) return null;
  const segments = decoded.split("/").slice(1);
  if (segments.some((s) => s.startsWith("."))) return null; // "..", ".", ".git", ".env"
  if (decoded === "/bundles/default.uvb") return DEFAULT_BUNDLE;
  const bundle = /^\/bundles\/([A-Za-z0-9][A-Za-z0-9._-]{0,63}\.uvb)$/.exec(decoded);
  if (bundle) return inside(BUNDLES, bundle[1]);
  for (const [prefix, root] of MOUNTS) {
    if (decoded.startsWith(prefix)) {
      const rest = decoded.slice(prefix.length);
      return inside(root, rest === "" && prefix === "/web/" ? "index.html" : rest);
    }
  }
  return null;
}

function inside(root, rel) {
  if (rel === "" || rel.endsWith("/")) return null; // no directory listing
  const file = path.resolve(root, rel);
  if (!file.startsWith(root + path.sep)) return null;
  if (!(path.extname(file).toLowerCase() in MIME)) return null;
  return file;
}

async function handle(req, res) {
  const send = (status, text, extra = {}) => {
    res.writeHead(status, { ...HEADERS, "Content-Type": "text/plain; charset=utf-8", ...extra });
    res.end(req.method === "HEAD" ? undefined : text);
  };
  if (req.method !== "GET" && req.method !== "HEAD") return send(405, "method not allowed\n", { Allow: "GET, HEAD" });
  const raw = (req.url ?? "/").split("?")[0].split("#")[0];
  if (raw === "/" || raw === "/web") return send(302, "see /web/\n", { Location: "/web/" });
  if (raw === "/favicon.ico") return send(204, "");
  const file = resolvePath(raw);
  if (file === null) return send(404, "not found\n");
  const opened = await openServed(file);
  if (opened === null) return send(404, "not found\n");
  const { handle, stat } = opened;
  res.writeHead(200, {
    ...HEADERS,
    "Content-Type": MIME[path.extname(file).toLowerCase()],
    "Content-Length": stat.size,
  });
  if (req.method === "HEAD") {
    await handle.close();
    return res.end();
  }
  // pipeline closes the handle however the response ends (a client gone early included)
  pipeline(handle.createReadStream({ start: 0 }), res, () => undefined);
}

/**
 * Open `file` once and check what was opened: a regular file whose real path (of the open
 * handle: /proc/self/fd where there is one) lies inside a served folder. The response is read
 * from this handle, so a symbolic link swapped in after the check changes nothing. Resolves to
 * `{handle, stat}` (the caller closes the handle), or null (404).
 */
export async function openServed(file) {
  let handle;
  try {
    handle = await fs.open(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch {
    return null;
  }
  try {
    const stat = await handle.stat();
    const real = await realPathOf(handle, file, stat);
    const roots = [...MOUNTS.map(([, r]) => r), BUNDLES, path.dirname(DEFAULT_BUNDLE)];
    const realRoots = await Promise.all(roots.map((r) => fs.realpath(r).catch(() => r)));
    if (stat.isFile() && real !== null && realRoots.some((r) => real.startsWith(r + path.sep))) {
      return { handle, stat };
    }
  } catch {
    // unreadable: 404 below
  }
  await handle.close();
  return null;
}

/** The real path of the open `handle`, or null when it cannot be told for sure. */
async function realPathOf(handle, file, stat) {
  try {
    return await fs.readlink(`/proc/self/fd/${handle.fd}`);
  } catch {
    // no /proc: the real path of the name, if it is still the file that was opened
    const real = await fs.realpath(file);
    const now = await fs.stat(real);
    return now.ino === stat.ino && now.dev === stat.dev ? real : null;
  }
}

/** Start the server on 127.0.0.1; resolves to `{server, port, url, close()}`. */
export function startServer({ port = 8765, host = "127.0.0.1" } = {}) {
  return new Promise((resolve, reject) => {
    const server = createServer((req, res) => {
      handle(req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500, HEADERS);
        res.end();
      });
    });
    server.once("error", reject);
    server.listen(port, host, () => {
      const actual = server.address().port;
      resolve({
        server,
        port: actual,
        url: `http://${host}:${actual}/web/`,
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}

function parsePort(argv) {
  let port = 8765;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = arg === "--port" ? argv[++i] : arg.startsWith("--port=") ? arg.slice(7) : undefined;
    if (value === undefined) {
      if (arg === "--help" || arg === "-h") {
        console.log("usage: node scripts/serve.mjs [--port N]   (default 8765; 0 = any free port)");
        process.exit(0);
      }
      console.error(`serve.mjs: unknown argument ${JSON.stringify(arg)}`);
      process.exit(2);
    }
    if (!/^\d+$/.test(value) || Number(value) > 65535) {
      console.error(`serve.mjs: --port needs a number in 0..65535, not ${JSON.stringify(value)}`);
      process.exit(2);
    }
    port = Number(value);
  }
  return port;
}

/** One line for a port the server cannot listen on, naming the port and `--port` (never a stack trace). */
export function listenError(error, port) {
  const why =
    error?.code === "EADDRINUSE"
      ? "is in use (another server, or this one already running?)"
      : error?.code === "EACCES"
        ? "needs privileges this user does not have"
        : `cannot be listened on (${error?.code ?? error?.message ?? error})`;
  return `serve.mjs: port ${port} on 127.0.0.1 ${why}: choose another with --port N (--port 0: any free port)`;
}

/** How often the server checks that the process that started it is still there. */
const PARENT_CHECK_MS = 250;

/**
 * End this process on SIGINT, SIGTERM or SIGHUP, and when its parent goes away (it is then
 * re-parented, so `process.ppid` changes): a server left behind would hold its port.
 */
function stopWithParent() {
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.once(signal, () => process.exit(0));
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(0);
  }, PARENT_CHECK_MS).unref();
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const port = parsePort(process.argv.slice(2));
  try {
    await fs.access(path.join(JS, "dist", "src", "browser.js"));
  } catch {
    console.error("serve.mjs: js/dist is missing: run npm run build first");
  }
  let url;
  try {
    ({ url } = await startServer({ port }));
  } catch (error) {
    console.error(listenError(error, port));
    process.exit(2);
  }
  stopWithParent();
  console.log(`uvsdk page: ${url}`);
}
