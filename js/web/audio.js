// Microphone capture and resampling for the uvsdk page.
//
// Microphone.record: raw PCM from getUserMedia with the browser's voice processing switched off
// (echo cancellation, noise suppression, automatic gain), mixed to mono in an AudioWorklet, at
// the AudioContext's rate (usually 48 kHz). resample: to the bundle's rate with the browser's
// decoder (decodeAudioData of an OfflineAudioContext at the target rate), which converts with a
// band-limited (windowed-sinc) resampler in Chromium and Firefox; an AudioBufferSourceNode
// played at another rate would interpolate linearly instead.

const CONSTRAINTS = {
  audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false, channelCount: { ideal: 1 } },
  video: false,
};

/** How long the microphone stays open after the last recording (consecutive clips share it). */
export const IDLE_RELEASE_MS = 15000;

/**
 * The microphone: opened on the first recording and kept open while clips follow one another,
 * released after {@link IDLE_RELEASE_MS} without a recording (or by release()).
 */
export class Microphone {
  #stream = null;
  #context = null;
  #timer = null;
  #opening = null;

  get open() {
    return this.#stream !== null;
  }

  async #acquire() {
    clearTimeout(this.#timer);
    if (this.#stream) return;
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new Error("this browser gives no microphone access here (a secure context is needed: https or localhost)");
    }
    this.#opening ??= (async () => {
      const stream = await navigator.mediaDevices.getUserMedia(CONSTRAINTS);
      const context = new AudioContext({ latencyHint: "interactive" });
      try {
        await context.audioWorklet.addModule(new URL("./recorder-worklet.js", import.meta.url));
      } catch (error) {
        for (const track of stream.getTracks()) track.stop();
        await context.close().catch(() => {});
        throw error;
      }
      this.#stream = stream;
      this.#context = context;
    })().finally(() => {
      this.#opening = null;
    });
    await this.#opening;
  }

  /** Stop the tracks and close the audio context (the browser's microphone indicator goes off). */
  release() {
    clearTimeout(this.#timer);
    for (const track of this.#stream?.getTracks() ?? []) track.stop();
    this.#context?.close().catch(() => {});
    this.#stream = null;
    this.#context = null;
  }

  /**
   * Record `seconds` of audio; `onProgress(fraction)` as samples arrive. Resolves to
   * `{samples, sampleRate}`: mono float32 at the audio context's rate.
   */
  async record(seconds, { onProgress } = {}) {
    await this.#acquire();
    const context = this.#context;
    try {
      if (context.state !== "running") await context.resume();
      const source = context.createMediaStreamSource(this.#stream);
      const node = new AudioWorkletNode(context, "uvsdk-recorder", { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1] });
      const rate = context.sampleRate;
      const wanted = Math.round(seconds * rate);
      const samples = new Float32Array(wanted);
      let filled = 0;
      await new Promise((resolve, reject) => {
        const [track] = this.#stream.getAudioTracks();
        track.onended = () => reject(new Error("the microphone was disconnected"));
        node.port.onmessage = (event) => {
          if (filled >= wanted) return;
          const block = event.data;
          const take = Math.min(block.length, wanted - filled);
          samples.set(block.subarray(0, take), filled);
          filled += take;
          onProgress?.(filled / wanted);
          if (filled >= wanted) {
            node.port.postMessage("stop");
            resolve();
          }
        };
        source.connect(node);
        node.connect(context.destination); // the node outputs silence; being connected keeps it running
      });
      source.disconnect();
      node.disconnect();
      return { samples, sampleRate: rate };
    } catch (error) {
      this.release();
      throw error;
    } finally {
      clearTimeout(this.#timer);
      if (this.#stream) this.#timer = setTimeout(() => this.release(), IDLE_RELEASE_MS);
    }
  }
}

/** A mono IEEE-float WAV file of `samples` at `rate` (what decodeAudioData reads back exactly). */
export function floatWav(samples, rate) {
  const bytes = new ArrayBuffer(44 + samples.length * 4);
  const view = new DataView(bytes);
  const text = (offset, s) => [...s].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, 36 + samples.length * 4, true);
  text(8, "WAVE");
  text(12, "fmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 3, true); // WAVE_FORMAT_IEEE_FLOAT
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * 4, true);
  view.setUint16(32, 4, true);
  view.setUint16(34, 32, true);
  text(36, "data");
  view.setUint32(40, samples.length * 4, true);
  new Float32Array(bytes, 44).set(samples);
  return bytes;
}

/** Mono float32 `samples` at `fromRate` resampled to `toRate` (band-limited, see above). */
export async function resample(samples, fromRate, toRate) {
  if (fromRate === toRate) return samples.slice();
  const context = new OfflineAudioContext(1, 1, toRate);
  const buffer = await context.decodeAudioData(floatWav(samples, fromRate));
  if (buffer.sampleRate !== toRate) throw new Error(`resampling gave ${buffer.sampleRate} Hz, not ${toRate} Hz`);
  return buffer.getChannelData(0).slice();
}
