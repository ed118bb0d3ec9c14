/**
 * Browser-only parts: {@link IndexedDBStore}, templates and generation records in two object
 * stores of one IndexedDB database.
 */
import { NotEnrolledError, UvsdkError } from "./errors.js";
import { SUFFIX, type TemplateStore } from "./template.js";

export * from "./index.js";

const TEMPLATES = "templates";
const GENERATIONS = "generations";

function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(new UvsdkError(`IndexedDB: ${req.error?.name ?? "error"}`, "store.io"));
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onabort = tx.onerror = () => reject(new UvsdkError(`IndexedDB: ${tx.error?.name ?? "transaction aborted"}`, "store.io"));
  });
}

/** A {@link TemplateStore} in IndexedDB (object stores "templates" and "generations"). */
export class IndexedDBStore implements TemplateStore {
  private constructor(
    private readonly db: IDBDatabase,
    private readonly name: string,
  ) {}

  /** Open (creating if needed) the database `name`. */
  static async open(name = "uvsdk", factory: IDBFactory = indexedDB): Promise<IndexedDBStore> {
    const req = factory.open(name, 1);
    req.onupgradeneeded = () => {
      const db = req.result;
      if (!db.objectStoreNames.contains(TEMPLATES)) db.createObjectStore(TEMPLATES);
      if (!db.objectStoreNames.contains(GENERATIONS)) db.createObjectStore(GENERATIONS);
    };
    return new IndexedDBStore(await request(req), name);
  }

  async read(user: string): Promise<Uint8Array | null> {
    const tx = this.db.transaction(TEMPLATES, "readonly");
    const value = await request(tx.objectStore(TEMPLATES).get(user));
    return value instanceof Uint8Array ? value.slice() : value instanceof ArrayBuffer ? new Uint8Array(value) : null;
  }

  async write(user: string, bytes: Uint8Array, options: { mustExist?: boolean } = {}): Promise<void> {
    // One readwrite transaction: the existence check and the put are atomic.
    const tx = this.db.transaction(TEMPLATES, "readwrite");
    const store = tx.objectStore(TEMPLATES);
    if (options.mustExist) {
      const count = await request(store.count(user));
      if (count === 0) {
        tx.abort();
        throw new NotEnrolledError(`${user}${SUFFIX} was deleted meanwhile: not written again`);
      }
    }
    store.put(bytes.slice(), user);
    await done(tx);
  }

  async remove(user: string): Promise<boolean> {
    const tx = this.db.transaction(TEMPLATES, "readwrite");
    const store = tx.objectStore(TEMPLATES);
    const count = await request(store.count(user));
    store.delete(user);
    await done(tx);
    return count > 0;
  }

  async getGeneration(keyIdHex: string): Promise<number | null> {
    const tx = this.db.transaction(GENERATIONS, "readonly");
    const value = await request(tx.objectStore(GENERATIONS).get(keyIdHex));
    return typeof value === "number" ? value : null;
  }

  async setGeneration(keyIdHex: string, generation: number): Promise<void> {
    const tx = this.db.transaction(GENERATIONS, "readwrite");
    tx.objectStore(GENERATIONS).put(generation, keyIdHex);
    await done(tx);
  }

  async removeGeneration(keyIdHex: string): Promise<void> {
    const tx = this.db.transaction(GENERATIONS, "readwrite");
    tx.objectStore(GENERATIONS).delete(keyIdHex);
    await done(tx);
  }

  /**
   * Take the user's lock for a read-modify-write (spec §12): the Web Lock
   * `uvsdk:<database>:<user>`, shared by every tab and worker of the origin. Without the Web
   * Locks API, the verifier's lock within this page is all there is.
   */
  async lock(user: string): Promise<() => Promise<void>> {
    const locks = (globalThis as { navigator?: { locks?: LockManager } }).navigator?.locks;
    if (!locks) return async () => undefined;
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    await new Promise<void>((granted, refused) => {
      locks
        .request(`uvsdk:${this.name}:${user}`, { mode: "exclusive" }, () => {
          granted();
          return held;
        })
        .catch(refused);
    });
    return async () => release();
  }

  /** Close the database. */
  close(): void {
    this.db.close();
  }
}
