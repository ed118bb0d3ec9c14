/**
 * Node-only parts: {@link FileStore} (one `<user>.uvt` file per user, generations in a state
 * folder outside the store, as the Python FileFreshness) and {@link decodeWavFile}.
 */
import { promises as fs, constants, readSync } from "node:fs";
import * as path from "node:path";
import * as os from "node:os";
import { randomBytes } from "node:crypto";
import { NotEnrolledError, TemplateError, UvsdkError, MediaError } from "./errors.js";
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
      throw new UvsdkError(`cannot write to ${printable(folder)} (${osMessage(error)})`);
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
    throw new UvsdkError(`cannot write ${printable(name)} (${osMessage(error)})`);
  } finally {
    if (handle) await handle.close().catch(() => undefined);
    if (created) await fs.unlink(temporary).catch(() => undefined);
  }
}

/** A folder of `<user>.uvt` templates; generations in `<stateDir>/freshness/<salt hex>.gen`. */
export class FileStore implements TemplateStore {
  readonly directory: string;
  readonly stateDir: string;

  constructor(directory: string, options: { stateDir?: string } = {}) {
    this.directory = directory;
    this.stateDir = options.stateDir ?? defaultStateDir();
  }

  private file(user: string): string {
    return path.join(this.directory, `${user}${SUFFIX}`);
  }

  private generationFile(keyIdHex: string): string {
    if (!/^[0-9a-f]+$/.test(keyIdHex)) throw new UvsdkError("a key id is lowercase hex");
    return path.join(this.stateDir, "freshness", `${keyIdHex}.gen`);
  }

  async read(user: string): Promise<Uint8Array | null> {
    const file = this.file(user);
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(file, constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw new TemplateError(`${user}${SUFFIX}: cannot read (${osMessage(error)})`);
    }
    try {
      const info = await handle.stat();
      if (!info.isFile()) throw new TemplateError(`${user}${SUFFIX}: not a regular file`);
      const buffer = new Uint8Array(Math.min(info.size, MAX_FILE_BYTES) + 1);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      return buffer.slice(0, bytesRead);
    } finally {
      await handle.close();
    }
  }

  async write(user: string, bytes: Uint8Array, options: { mustExist?: boolean } = {}): Promise<void> {
    if (!options.mustExist) await fs.mkdir(this.directory, { recursive: true, mode: 0o700 });
    await atomicWrite(this.file(user), bytes, options.mustExist ?? false);
  }

  async remove(user: string): Promise<boolean> {
    try {
      await fs.unlink(this.file(user));
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw new UvsdkError(`cannot remove ${user}${SUFFIX} (${osMessage(error)})`);
    }
  }

  async getGeneration(keyIdHex: string): Promise<number | null> {
    const file = this.generationFile(keyIdHex);
    let text: string;
    try {
      text = await fs.readFile(file, "ascii");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw new TemplateError(`cannot read the template's freshness record ${printable(file)} (${osMessage(error)})`);
    }
    if (!/^\s*[-+]?\d+\s*$/.test(text)) throw new TemplateError(`the template's freshness record ${printable(file)} is damaged`);
    return Number(text.trim());
  }

  async setGeneration(keyIdHex: string, generation: number): Promise<void> {
    const file = this.generationFile(keyIdHex);
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
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
    handle = await fs.open(file, constants.O_RDONLY);
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
