/**
 * Node-only parts: {@link FileStore} (one `<user>.uvt` file per user, generations in a state
 * folder outside the store, as the Python FileFreshness; the per-user lock file the Python
 * takes too) and {@link decodeWavFile}.
 */
import { promises as fs, constants, readSync, type Stats } from "node:fs";
import * as path from "node:path";
import * as os from "node:os";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { NotEnrolledError, StorePermissionError, TemplateError, UvsdkError, MediaError } from "./errors.js";
import { MAX_FILE_BYTES, SUFFIX, type TemplateStore } from "./template.js";
import { decodeWavSamples, wavLayout, type DecodedAudio } from "./media.js";
import { printable } from "./errors.js";

export * from "./index.js";

/** `$UVSDK_STATE_DIR`, else `$XDG_STATE_HOME/uvsdk`, else `~/.local/state/uvsdk` (platformdirs on Linux). */
export function defaultStateDir(): string {
  if (process.env["UVSDK_STATE_DIR"]) return process.env["UVSDK_STATE_DIR"];
  const base = process.env["XDG_STATE_HOME"] || path.join(os.homedir(), ".local", "state");
  return path.join(base, "uvsdk");
}

function osMessage(error: unknown): string {
  const e = error as NodeJS.ErrnoException;
  return e?.code ?? e?.message ?? String(error);
}

/**
 * `files.atomic_write`: a temporary file in the same folder (mode 0600, exclusive create),
 * fsync, rename over the target, fsync the folder. The folder is never created here; with
 * `mustExist` the target must still be there just before the rename.
 */
export async function atomicWrite(target: string, bytes: Uint8Array, mustExist: boolean): Promise<void> {
  const folder = path.dirname(target);
  const name = path.basename(target);
  const temporary = path.join(folder, `.${name}.${randomBytes(6).toString("hex")}.tmp`);
  let handle: fs.FileHandle | null = null;
  let created = false;
  try {
    try {
      handle = await fs.open(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") {
        throw new NotEnrolledError(`${printable(folder)} no longer exists (deleted?): nothing written`);
      }
      throw new UvsdkError(`cannot write to ${printable(folder)} (${osMessage(error)})`, "store.io");
    }
    created = true;
    await handle.writeFile(bytes);
    await handle.sync();
    await handle.close();
    handle = null;
    if (mustExist) {
      try {
        await fs.lstat(target);
      } catch {
        throw new NotEnrolledError(`${printable(name)} was deleted meanwhile: not written again`);
      }
    }
    await fs.rename(temporary, target);
    created = false;
    try {
      const dir = await fs.open(folder, constants.O_RDONLY);
      await dir.sync().catch(() => undefined);
      await dir.close();
    } catch {
      // fsync of a folder is best effort (not every platform allows it)
    }
  } catch (error) {
    if (error instanceof UvsdkError) throw error;
    throw new UvsdkError(`cannot write ${printable(name)} (${osMessage(error)})`, "store.io");
  } finally {
    if (handle) await handle.close().catch(() => undefined);
    if (created) await fs.unlink(temporary).catch(() => undefined);
  }
}

/**
 * `files.check_private`: refuse a folder that another user (not root) owns or that group or
 * others can write, as ssh refuses such a `~/.ssh`. A missing folder passes (nothing to trust yet).
 */
export async function checkPrivate(directory: string, what: string): Promise<void> {
  if (typeof process.geteuid !== "function") return; // Windows: ACLs, not mode bits
  let info: Stats;
  try {
    info = await fs.stat(directory);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw new UvsdkError(`cannot read the ${what} ${printable(directory)} (${osMessage(error)})`, "store.io");
  }
  if (info.uid !== process.geteuid() && info.uid !== 0) {
    throw new StorePermissionError(
      `the ${what} ${printable(directory)} belongs to another user (uid ${info.uid}): refusing to use it; use a folder of your own`,
    );
  }
  if (info.mode & 0o022) {
    throw new StorePermissionError(
      `the ${what} ${printable(directory)} is writable by other users (mode ${modeText(info)}): ` +
        `refusing to use it; run chmod go-w ${printable(directory)}`,
    );
  }
}

/** `files.check_private_file`: the same for a file already opened (its handle's stat). */
export function checkPrivateFile(info: Stats, file: string): void {
  if (typeof process.geteuid !== "function") return;
  const name = printable(path.basename(file));
  if (info.uid !== process.geteuid() && info.uid !== 0) {
    throw new StorePermissionError(`${name} belongs to another user (uid ${info.uid}): refusing to use it`);
  }
  if (info.mode & 0o022) {
    throw new StorePermissionError(
      `${name} is writable by other users (mode ${modeText(info)}): refusing to use it; run chmod 600 ${printable(file)}`,
    );
  }
}

function modeText(info: Stats): string {
  return (info.mode & 0o7777).toString(8).padStart(4, "0");
}

/**
 * `files.open_regular`: open for reading only a regular file, never following a symbolic link
 * and never blocking on a FIFO or device (O_NONBLOCK, then fstat). Null when there is no file.
 */
export async function openRegular(file: string): Promise<{ handle: fs.FileHandle; info: Stats } | null> {
  const name = printable(path.basename(file));
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ELOOP" || code === "EMLINK") throw new TemplateError(`${name} is a symbolic link, not a regular file`, "template.unreadable");
    throw new TemplateError(`${name}: cannot read (${osMessage(error)})`, "template.unreadable");
  }
  const info = await handle.stat();
  if (!info.isFile()) {
    await handle.close();
    throw new TemplateError(`${name} is not a regular file`, "template.unreadable");
  }
  return { handle, info };
}

/** A user's lock file is `<store>/.<user>.lock` (spec §10.1; `files.user_lock`). */
export const LOCK_SUFFIX = ".lock";
const BREAK_SUFFIX = ".break";
const FIRST_WAIT_MS = 2;
const LONGEST_WAIT_MS = 50;
/** `files.LOCK_TIMEOUT_SECONDS`: how long one holder may keep a user's lock before a waiter gives up. */
export const LOCK_TIMEOUT_MS = 30_000;
/** `files.LOCK_NOTICE_SECONDS`: how long a waiter waits in silence before it says what it waits for. */
export const LOCK_NOTICE_MS = 1_000;
/**
 * The tokens of the locks this process holds or is taking: a lock naming this process's id with
 * another token was left by an earlier process that had the same id (a container restarted).
 */
const OWN_TOKENS = new Set<string>();

/** How {@link userLock} waits: the longest hold it waits out, when to say so, and to whom. */
export interface LockWait {
  timeoutMs?: number;
  noticeMs?: number;
  onWait?: (line: string) => void;
}

/**
 * `files.user_lock`: take `<directory>/.<user>.lock`, the per-user lock every uvsdk process
 * takes (Python's and this port's alike); resolves to the function that releases it.
 *
 * The file holds `<pid> <random token> <host name>`, written whole to a file of its own and then
 * hard-linked into place (which fails while another holds the lock). A waiting process polls. A
 * lock is broken when provably stale (spec §10.1): not a line uvsdk writes, naming a process of
 * this host that no longer exists, or naming this very process with a token it did not draw; one
 * process at a time breaks it (`.<user>.lock.break`, taken the same way). Any other lock is
 * waited on: after `noticeMs` `onWait` is told once what is awaited, and when one holder has kept
 * it `timeoutMs` (the clock restarts when the lock changes hands) the wait ends in a
 * `store.locked` error naming the lock file. Nothing is left behind when the attempt fails.
 */
export async function userLock(directory: string, user: string, wait: LockWait = {}): Promise<() => Promise<void>> {
  const lock = path.join(directory, `.${user}${LOCK_SUFFIX}`);
  const token = randomBytes(8).toString("hex");
  const owner = `${process.pid} ${token} ${os.hostname()}\n`;
  const candidate = `${lock}.${randomBytes(6).toString("hex")}`;
  OWN_TOKENS.add(token);
  try {
    await writeCandidate(candidate, owner, directory);
    try {
      await acquire(lock, candidate, owner, wait);
    } finally {
      await fs.unlink(candidate).catch(() => undefined);
    }
  } catch (error) {
    OWN_TOKENS.delete(token);
    throw error;
  }
  return async () => {
    try {
      await removeIfHeldBy(lock, owner).catch(() => undefined);
    } finally {
      OWN_TOKENS.delete(token);
    }
  };
}

/** The lock line, whole, in a file of its own; removed again if it cannot be written (a full disk). */
async function writeCandidate(candidate: string, owner: string, directory: string): Promise<void> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(candidate, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (error) {
    throw new UvsdkError(`cannot lock ${printable(directory)} (${osMessage(error)})`, "store.io");
  }
  try {
    await handle.writeFile(owner, "ascii");
  } catch (error) {
    await handle.close().catch(() => undefined);
    await fs.unlink(candidate).catch(() => undefined);
    throw new UvsdkError(`cannot lock ${printable(directory)} (${osMessage(error)})`, "store.io");
  }
  await handle.close();
}

async function acquire(lock: string, candidate: string, owner: string, wait: LockWait): Promise<void> {
  const timeoutMs = wait.timeoutMs ?? LOCK_TIMEOUT_MS;
  const noticeMs = wait.noticeMs ?? LOCK_NOTICE_MS;
  let pause = FIRST_WAIT_MS;
  const started = performance.now();
  let holderSeen: string | null = null;
  let since = started;
  let told = false;
  for (;;) {
    if (await linked(candidate, lock)) return;
    const holder = await readLock(lock);
    if (holder === null) continue; // released meanwhile
    if (!holderAlive(holder) && (await breakStale(lock, candidate, owner, holder))) continue;
    const now = performance.now();
    if (holder !== holderSeen) {
      // the lock changed hands: progress, the clock restarts
      holderSeen = holder;
      since = now;
    }
    if (wait.onWait && !told && now - started >= noticeMs) {
      told = true;
      wait.onWait(`waiting for the lock ${printable(lock)}, held by ${describe(holder)} (giving up if one holder keeps it ${timeoutMs / 1000} s)`);
    }
    if (now - since >= timeoutMs) {
      throw new UvsdkError(
        `the lock ${printable(lock)} has been held by ${describe(holder)} for ${timeoutMs / 1000} s: ` +
          `if no uvsdk process runs there, remove ${printable(lock)}`,
        "store.locked",
      );
    }
    await sleep(Math.min(pause, Math.max(timeoutMs - (now - since), 0)));
    pause = Math.min(2 * pause, LONGEST_WAIT_MS);
  }
}

/** `process 123 on host h`, escaped (the file's content is not trusted to be printable). */
function describe(holder: string): string {
  const fields = holder.split(/\s+/).filter(Boolean);
  if (fields.length !== 3) return "a file that is not a uvsdk lock";
  return `process ${printable(fields[0]!)} on ${printable(fields[2]!)}`;
}

/**
 * Remove `lock` if it still holds `stale`, under the break lock (one breaker at a time). False
 * when another process holds the break lock (the caller waits, as on a live holder).
 */
async function breakStale(lock: string, candidate: string, owner: string, stale: string): Promise<boolean> {
  const guard = lock + BREAK_SUFFIX;
  if (!(await linked(candidate, guard))) {
    const breaker = await readLock(guard);
    if (breaker !== null && !holderAlive(breaker)) {
      await removeIfHeldBy(guard, breaker); // a breaker that crashed in turn
      return true;
    }
    return false;
  }
  try {
    await removeIfHeldBy(lock, stale);
  } finally {
    await removeIfHeldBy(guard, owner);
  }
  return true;
}

/** Hard-link `from` as `to`: true, or false when `to` exists. */
async function linked(from: string, to: string): Promise<boolean> {
  try {
    await fs.link(from, to);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw new UvsdkError(`cannot lock ${printable(path.dirname(to))} (${osMessage(error)})`, "store.io");
  }
}

async function readLock(lock: string): Promise<string | null> {
  const opened = await openRegular(lock);
  if (opened === null) return null;
  try {
    const buffer = new Uint8Array(256);
    const { bytesRead } = await opened.handle.read(buffer, 0, buffer.length, 0);
    return Buffer.from(buffer.subarray(0, bytesRead)).toString("latin1");
  } finally {
    await opened.handle.close();
  }
}

async function removeIfHeldBy(lock: string, holder: string): Promise<void> {
  if ((await readLock(lock)) !== holder) return;
  await fs.unlink(lock).catch(() => undefined);
}

/**
 * Whether the process a lock file names may still hold it (another host's is taken to). A lock
 * naming this process is alive only with a token this process drew.
 */
function holderAlive(holder: string): boolean {
  const fields = holder.split(/\s+/).filter(Boolean);
  if (fields.length !== 3 || !/^\d+$/.test(fields[0]!)) return false; // not a lock any uvsdk wrote whole
  if (fields[2] !== os.hostname()) return true;
  if (Number(fields[0]) === process.pid) return OWN_TOKENS.has(fields[1]!);
  return processExists(Number(fields[0]));
}

function processExists(pid: number): boolean {
  if (pid <= 0) return false;
  if (process.platform === "win32") return true; // as the Python's
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
}

/** A folder of `<user>.uvt` templates; generations in `<stateDir>/freshness/<salt hex>.gen`. */
export class FileStore implements TemplateStore {
  readonly directory: string;
  readonly stateDir: string;

  /** How a lock is waited on ({@link userLock}): `lockTimeoutMs`, `lockNoticeMs`, `onLockWait`. */
  readonly lockWait: LockWait;

  constructor(
    directory: string,
    options: { stateDir?: string; lockTimeoutMs?: number; lockNoticeMs?: number; onLockWait?: (line: string) => void } = {},
  ) {
    this.directory = directory;
    this.stateDir = options.stateDir ?? defaultStateDir();
    this.lockWait = { timeoutMs: options.lockTimeoutMs, noticeMs: options.lockNoticeMs, onWait: options.onLockWait };
  }

  private file(user: string): string {
    return path.join(this.directory, `${user}${SUFFIX}`);
  }

  private generationFile(keyIdHex: string): string {
    if (!/^[0-9a-f]+$/.test(keyIdHex)) throw new UvsdkError("a key id is lowercase hex", "argument.invalid");
    return path.join(this.stateDir, "freshness", `${keyIdHex}.gen`);
  }

  async read(user: string): Promise<Uint8Array | null> {
    await checkPrivate(this.directory, "store");
    const opened = await openRegular(this.file(user));
    if (opened === null) return null;
    const { handle, info } = opened;
    try {
      checkPrivateFile(info, this.file(user));
      const buffer = new Uint8Array(Math.min(info.size, MAX_FILE_BYTES) + 1);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      return buffer.slice(0, bytesRead);
    } finally {
      await handle.close();
    }
  }

  async write(user: string, bytes: Uint8Array, options: { mustExist?: boolean } = {}): Promise<void> {
    if (!options.mustExist) await fs.mkdir(this.directory, { recursive: true, mode: 0o700 });
    await checkPrivate(this.directory, "store");
    await this.checkFreshness(); // before the file: never half a write
    await atomicWrite(this.file(user), bytes, options.mustExist ?? false);
  }

  /** Take the user's lock ({@link userLock}); a missing store is made with `create`, else there is nothing to lock. */
  async lock(user: string, options: { create?: boolean } = {}): Promise<() => Promise<void>> {
    if (options.create) await fs.mkdir(this.directory, { recursive: true, mode: 0o700 });
    try {
      if (!(await fs.stat(this.directory)).isDirectory()) return async () => undefined;
    } catch {
      return async () => undefined;
    }
    await checkPrivate(this.directory, "store");
    return userLock(this.directory, user, this.lockWait);
  }

  /** Refuse a state or freshness folder another user could write (they could lock the owner out). */
  private async checkFreshness(): Promise<void> {
    await checkPrivate(this.stateDir, "state folder");
    await checkPrivate(path.join(this.stateDir, "freshness"), "freshness folder");
  }

  async remove(user: string): Promise<boolean> {
    try {
      await fs.unlink(this.file(user));
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw new UvsdkError(`cannot remove ${user}${SUFFIX} (${osMessage(error)})`, "store.io");
    }
  }

  async getGeneration(keyIdHex: string): Promise<number | null> {
    const file = this.generationFile(keyIdHex);
    await this.checkFreshness();
    const opened = await openRegular(file);
    if (opened === null) return null;
    let text: string;
    try {
      checkPrivateFile(opened.info, file);
      const buffer = new Uint8Array(64);
      const { bytesRead } = await opened.handle.read(buffer, 0, buffer.length, 0);
      text = Buffer.from(buffer.subarray(0, bytesRead)).toString("ascii");
    } finally {
      await opened.handle.close();
    }
    if (!/^\s*[-+]?\d+\s*$/.test(text)) throw new TemplateError(`the template's freshness record ${printable(file)} is damaged`, "template.freshness");
    return Number(text.trim());
  }

  async setGeneration(keyIdHex: string, generation: number): Promise<void> {
    const file = this.generationFile(keyIdHex);
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    await this.checkFreshness();
    await atomicWrite(file, new TextEncoder().encode(`${generation}\n`), false);
  }

  async removeGeneration(keyIdHex: string): Promise<void> {
    await fs.unlink(this.generationFile(keyIdHex)).catch(() => undefined);
  }
}

/**
 * Read and decode a WAV file (media.decodeWav), named by its file name in messages. The header is
 * read first, and a file refused by it (too long for `maxSeconds`, truncated, not WAV) is refused
 * before its samples are read, as media.load_audio refuses it; then only the samples are read.
 */
export async function decodeWavFile(file: string, options: { maxSeconds?: number } = {}): Promise<DecodedAudio> {
  const name = printable(path.basename(file));
  const unreadable = (error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    return new MediaError(code === "ENOENT" ? `${name}: no such file` : `${name}: not a readable audio file (${osMessage(error)})`);
  };
  let handle: fs.FileHandle;
  try {
    // O_NONBLOCK: a FIFO (or device) given as audio is refused at once below, never waited on
    handle = await fs.open(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (error) {
    throw unreadable(error);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new MediaError(`${name}: not a regular file`, "undecodable");
    const layout = wavLayout((at, length) => readAt(handle, at, length), info.size, { name, maxSeconds: options.maxSeconds });
    const length = layout.frames * layout.blockAlign;
    const samples = await readSamples(handle, layout.dataOffset, length);
    if (samples.length < length) {
      throw new MediaError(`${name}: truncated: the file became shorter while being read`, "truncated");
    }
    return decodeWavSamples(samples, layout, name);
  } catch (error) {
    if (error instanceof MediaError) throw error;
    throw unreadable(error);
  } finally {
    await handle.close();
  }
}

/** Up to `length` bytes of the open file at `position` (fewer at its end): small header reads. */
function readAt(handle: fs.FileHandle, position: number, length: number): Uint8Array {
  const buffer = new Uint8Array(length);
  let filled = 0;
  while (filled < length) {
    const count = readSync(handle.fd, buffer, filled, length - filled, position + filled);
    if (count === 0) break;
    filled += count;
  }
  return buffer.subarray(0, filled);
}

/** Up to `length` bytes of the open file at `position` (fewer at its end), without blocking. */
async function readSamples(handle: fs.FileHandle, position: number, length: number): Promise<Uint8Array> {
  const buffer = new Uint8Array(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, position + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buffer.subarray(0, filled);
}
