/**
 * uvsdk verification core (TypeScript): a second implementation of the Python SDK
 * (sdk/uvsdk). Platform-neutral: runs in Node (onnxruntime-node) and in browsers
 * (onnxruntime-web); the ONNX Runtime module is injected, never imported here.
 * Platform stores: `uvsdk/node` (FileStore, decodeWavFile), `uvsdk/browser` (IndexedDBStore).
 * The JSON reader and writer (`json.ts`: integers kept apart from floats, as the manifest's
 * checks need; RFC 8785 for writing) and the message helpers (`text.ts`) are internal.
 */
export const VERSION = "0.1.0";
export * from "./errors.js";
export * from "./bundle.js";
export * from "./media.js";
export * from "./scoring.js";
export * from "./calibration.js";
export * from "./cohort.js";
export * from "./training.js";
export * from "./codeword.js";
export * from "./template.js";
export * from "./backoff.js";
export * from "./verifier.js";
export { b64encode, b64decodeStrict, hex, fromHex, packBits, unpackBits } from "./bytes.js";
