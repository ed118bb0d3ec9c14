/**
 * uvsdk verification core (TypeScript): a second implementation of the Python SDK
 * (sdk/uvsdk). Platform-neutral: runs in Node (onnxruntime-node) and in browsers
 * (onnxruntime-web); the ONNX Runtime module is injected, never imported here.
 */
export const VERSION = "0.1.0";
