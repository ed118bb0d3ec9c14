/**
 * Audio checks, silence trimming and windows (sdk/uvsdk/media.py), and a WAV decoder.
 *
 * No resampling here: the platform delivers audio at the bundle's sample rate (a port should
 * use a band-limited resampler, as the Python SDK's soxr "HQ"). Every failure is a MediaError
 * whose `reason` says what was wrong.
 */
import { MediaError } from "./errors.js";
import { meanSquare, roundHalfEven } from "./scoring.js";
import { num } from "./text.js";

export const DEFAULT_MAX_SECONDS = 60.0;
export const MAX_SAMPLE_RATE = 768_000;
export const SILENCE_RMS = 1e-3;
export const CLIP_LEVEL = 0.999;
export const MAX_CLIPPED_FRACTION = 0.01;
export const MAX_PEAK = 2.0;
export const TRIM_FRAME_SECONDS = 0.025;
export const TRIM_TOP_DB = 25.0;
export const TRIM_MARGIN_SECONDS = 0.1;

/**
 * `check_audio`: raise a MediaError on the first problem, in this order: `non_finite`,
 * `out_of_range` (a sample beyond ±2), `too_short`, `silent` (RMS below 1e-3, float64), `clipped`
 * (more than 1 % of samples at |x| >= 0.999).
 */
export function checkAudio(
  samples: ArrayLike<number>,
  sampleRate: number,
  options: { minSeconds: number; name?: string },
): void {
  const name = options.name ?? "audio";
  const n = samples.length;
  let peak = 0;
  for (let i = 0; i < n; i++) {
    const x = samples[i]!;
    if (!Number.isFinite(x)) throw new MediaError(`${name}: contains NaN or infinite samples`, "non_finite");
    const a = Math.abs(x);
    if (a > peak) peak = a;
  }
  if (peak > MAX_PEAK) {
    throw new MediaError(
      `${name}: samples reach ${num(peak, 3)}, far outside [-1, 1]: not normalised audio`,
      "out_of_range",
    );
  }
  const seconds = n / sampleRate;
  if (seconds < options.minSeconds) {
    throw new MediaError(
      `${name}: too short: ${seconds.toFixed(2)} s of audio, at least ${options.minSeconds.toFixed(2)} s needed`,
      "too_short",
    );
  }
  const rms = n ? Math.sqrt(meanSquare(samples)) : 0;
  if (rms < SILENCE_RMS) {
    const level = rms > 0 ? `${(20 * Math.log10(rms)).toFixed(0)} dBFS` : "digital silence";
    throw new MediaError(`${name}: silent: level ${level}, below -60 dBFS`, "silent");
  }
  let clippedCount = 0;
  for (let i = 0; i < n; i++) if (Math.abs(samples[i]!) >= CLIP_LEVEL) clippedCount++;
  const clipped = clippedCount / n;
  if (clipped > MAX_CLIPPED_FRACTION) {
    throw new MediaError(
      `${name}: clipped: ${(100 * clipped).toFixed(1)}% of samples at full scale, at most 1% tolerated`,
      "clipped",
    );
  }
}

/** Options of {@link trimSilence} (defaults as media.trim_silence). */
export interface TrimOptions {
  minSeconds?: number;
  topDb?: number;
  frameSeconds?: number;
  marginSeconds?: number;
}

/**
 * `trim_silence`: drop leading and trailing silence. Frames of 25 ms whose float64 mean energy is
 * within 25 dB of the loudest frame's count as speech; the clip is cut from the first such frame
 * to the end of the last, with 0.1 s of margin each side, and widened around its centre to at
 * least `minSeconds`. Returns `samples` itself when nothing is cut, else a copy of the span.
 */
export function trimSilence(samples: Float32Array, sampleRate: number, options: TrimOptions = {}): Float32Array {
  const [start, stop] = trimBounds(samples, sampleRate, options);
  return start === 0 && stop === samples.length ? samples : samples.slice(start, stop);
}

/** The span `[start, stop)` that {@link trimSilence} keeps. */
export function trimBounds(samples: ArrayLike<number>, sampleRate: number, options: TrimOptions = {}): [number, number] {
  const minSeconds = options.minSeconds ?? 0;
  const topDb = options.topDb ?? TRIM_TOP_DB;
  const frame = Math.max(1, roundHalfEven((options.frameSeconds ?? TRIM_FRAME_SECONDS) * sampleRate));
  const n = samples.length;
  const count = Math.floor(n / frame);
  if (count < 2) return [0, n];
  const level = new Float64Array(count);
  let loudest = -Infinity;
  for (let f = 0; f < count; f++) {
    const energy = meanSquare(samples, f * frame, frame);
    level[f] = 10 * Math.log10(Math.max(energy, 1e-20));
    if (level[f]! > loudest) loudest = level[f]!;
  }
  let first = -1;
  let last = -1;
  for (let f = 0; f < count; f++) {
    if (level[f]! >= loudest - topDb) {
      if (first < 0) first = f;
      last = f;
    }
  }
  const margin = roundHalfEven((options.marginSeconds ?? TRIM_MARGIN_SECONDS) * sampleRate);
  let start = Math.max(0, first * frame - margin);
  let stop = Math.min(n, (last + 1) * frame + margin);
  if (stop - start === n) return [0, n];
  const need = Math.min(n, Math.ceil(minSeconds * sampleRate));
  if (stop - start < need) {
    const centre = Math.floor((start + stop) / 2);
    start = Math.max(0, Math.min(centre - Math.floor(need / 2), n - need));
    stop = start + need;
  }
  return [start, stop];
}

/**
 * `window_starts`: the window width (`round(windowSeconds · rate)`, Python rounding) and the start
 * of every window: 0, hop, 2·hop, ... while they fit, plus one aligned to the end when the last
 * stops short of it. A clip no longer than one window has the single start 0.
 */
export function windowStarts(
  length: number,
  sampleRate: number,
  windowSeconds: number,
  hopSeconds: number,
): { width: number; starts: number[] } {
  const width = roundHalfEven(windowSeconds * sampleRate);
  const hop = roundHalfEven(hopSeconds * sampleRate);
  if (width < 1 || hop < 1) throw new RangeError("window and hop must each be at least one sample long");
  if (length <= width) return { width, starts: [0] };
  const starts: number[] = [];
  for (let s = 0; s <= length - width; s += hop) starts.push(s);
  if (starts[starts.length - 1]! + width < length) starts.push(length - width);
  return { width, starts };
}

/** `numpy.resize(x, width)`: the clip tiled from its start to exactly `width` samples. */
export function repeatPad(samples: Float32Array, width: number): Float32Array {
  if (samples.length === 0) return new Float32Array(width);
  const out = new Float32Array(width);
  for (let i = 0; i < width; i++) out[i] = samples[i % samples.length]!;
  return out;
}

/**
 * `audio_windows`: the windows covering the clip, `[windows][width]`; a clip shorter than one
 * window is repeat-padded to exactly one.
 */
export function audioWindows(
  samples: Float32Array,
  sampleRate: number,
  windowSeconds: number,
  hopSeconds: number,
): Float32Array[] {
  if (samples.length === 0) throw new RangeError("expected non-empty samples");
  const { width, starts } = windowStarts(samples.length, sampleRate, windowSeconds, hopSeconds);
  if (samples.length <= width) return [repeatPad(samples, width)];
  return starts.map((s) => samples.slice(s, s + width));
}

/** A decoded audio file. */
export interface DecodedAudio {
  /** Mono float32 samples (channels averaged in float64), nominally in [-1, 1]. */
  samples: Float32Array;
  sampleRate: number;
  channels: number;
}

const FORMAT_PCM = 1;
const FORMAT_FLOAT = 3;
const FORMAT_EXTENSIBLE = 0xfffe;
const STREAMING_SIZE = 0xffffffff;

function ascii(bytes: Uint8Array, at: number): string {
  return String.fromCharCode(bytes[at]!, bytes[at + 1]!, bytes[at + 2]!, bytes[at + 3]!);
}

/** Where a WAV file's samples lie and how they are encoded: what {@link wavLayout} checked. */
export interface WavLayout {
  float: boolean;
  bits: number;
  channels: number;
  rate: number;
  blockAlign: number;
  /** Byte offset and length of the samples in the file. */
  dataOffset: number;
  frames: number;
}

/**
 * The checks {@link decodeWav} makes before decoding a sample, on a file of `fileSize` bytes of
 * which `read(at, length)` returns the bytes at `at` (fewer at the end): its chunks, encoding,
 * sample rate, truncation and length (`too_long` over `maxSeconds`, `empty`). Reads only the
 * chunk headers and the fmt chunk, so a file is refused before its samples are read.
 */
export function wavLayout(
  read: (at: number, length: number) => Uint8Array,
  fileSize: number,
  options: { name?: string; maxSeconds?: number } = {},
): WavLayout {
  const name = options.name ?? "audio";
  const maxSeconds = options.maxSeconds ?? DEFAULT_MAX_SECONDS;
  const bad = (detail: string) => new MediaError(`${name}: not a readable audio file (${detail})`, "undecodable");
  const head = read(0, 12);
  if (fileSize < 12 || head.length < 12 || ascii(head, 0) !== "RIFF" || ascii(head, 8) !== "WAVE") {
    throw bad("not a RIFF/WAVE file");
  }
  let at = 12;
  let format = -1;
  let channels = 0;
  let rate = 0;
  let bits = 0;
  let blockAlign = 0;
  let data: { offset: number; size: number } | null = null;
  while (at + 8 <= fileSize) {
    const header = read(at, 8);
    const id = ascii(header, 0);
    const size = new DataView(header.buffer, header.byteOffset, 8).getUint32(4, true);
    const body = at + 8;
    if (id === "fmt ") {
      if (size < 16 || body + 16 > fileSize) throw bad("fmt chunk too short");
      const fmt = read(body, Math.min(size, 40));
      const view = new DataView(fmt.buffer, fmt.byteOffset, fmt.byteLength);
      format = view.getUint16(0, true);
      channels = view.getUint16(2, true);
      rate = view.getUint32(4, true);
      blockAlign = view.getUint16(12, true);
      bits = view.getUint16(14, true);
      if (format === FORMAT_EXTENSIBLE) {
        if (size < 40 || body + 40 > fileSize) throw bad("extensible fmt chunk too short");
        format = view.getUint16(24, true); // first two bytes of the sub-format GUID
      }
    } else if (id === "data") {
      const present = fileSize - body;
      if (size > present && size !== STREAMING_SIZE) {
        throw new MediaError(
          `${name}: truncated: the file is shorter than its header says (data chunk: ${size} bytes announced, ${present} present)`,
          "truncated",
        );
      }
      data = { offset: body, size: Math.min(size, present) };
      break;
    }
    at = body + size + (size & 1);
  }
  if (format < 0) throw bad("no fmt chunk");
  if (data === null) throw bad("no data chunk");
  if (channels < 1) throw bad("no channels");
  if (!(0 < rate && rate <= MAX_SAMPLE_RATE)) {
    throw new MediaError(`${name}: unsupported sample rate ${rate} Hz`, "undecodable");
  }
  const pcm = format === FORMAT_PCM && [8, 16, 24, 32].includes(bits);
  const float = format === FORMAT_FLOAT && (bits === 32 || bits === 64);
  if (!pcm && !float) throw bad(`unsupported encoding: format ${format}, ${bits} bits`);
  if (blockAlign !== (bits / 8) * channels) throw bad("inconsistent block alignment");
  const frames = Math.floor(data.size / blockAlign);
  if (frames > maxSeconds * rate) {
    throw new MediaError(
      `${name}: ${(frames / rate).toFixed(1)} s long, at most ${num(maxSeconds)} s accepted`,
      "too_long",
    );
  }
  if (frames === 0) throw new MediaError(`${name}: empty: the file holds no audio samples`, "empty");
  return { float, bits, channels, rate, blockAlign, dataOffset: data.offset, frames };
}

/**
 * Decode a WAV file (RIFF/WAVE): PCM 8 (unsigned), 16, 24 and 32-bit, IEEE float 32 and 64-bit,
 * plain or WAVE_FORMAT_EXTENSIBLE, any channel count. Values are scaled as libsndfile does
 * (integer / 2^(bits−1), float32 result); channels are averaged to mono in float64, then rounded
 * to float32, as media.load_audio. Refuses (MediaError) what load_audio refuses: `undecodable`,
 * `truncated` (a data chunk shorter than its header says), `too_long` (over `maxSeconds`), `empty`,
 * `non_finite`.
 */
export function decodeWav(
  bytes: Uint8Array,
  options: { name?: string; maxSeconds?: number } = {},
): DecodedAudio {
  const layout = wavLayout((at, length) => bytes.subarray(at, at + length), bytes.length, options);
  return decodeWavSamples(bytes.subarray(layout.dataOffset), layout, options.name ?? "audio");
}

/** The samples of a WAV file whose {@link wavLayout} is `layout`, from `bytes` (its data chunk on). */
export function decodeWavSamples(bytes: Uint8Array, layout: WavLayout, name: string): DecodedAudio {
  const { float, bits, channels, rate, blockAlign, frames } = layout;
  const width = bits / 8;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const read = (offset: number): number => {
    if (float) return Math.fround(bits === 32 ? view.getFloat32(offset, true) : view.getFloat64(offset, true));
    switch (bits) {
      case 8:
        return (bytes[offset]! - 128) / 128;
      case 16:
        return view.getInt16(offset, true) / 32768;
      case 24: {
        const v = bytes[offset]! | (bytes[offset + 1]! << 8) | (bytes[offset + 2]! << 16);
        return ((v << 8) >> 8) / 8388608;
      }
      default:
        return Math.fround(view.getInt32(offset, true)) / 2147483648;
    }
  };
  const samples = new Float32Array(frames);
  for (let f = 0; f < frames; f++) {
    const base = f * blockAlign;
    if (channels === 1) {
      samples[f] = read(base);
    } else {
      let sum = 0;
      for (let c = 0; c < channels; c++) sum += read(base + c * width);
      samples[f] = sum / channels;
    }
    if (!Number.isFinite(samples[f]!)) {
      throw new MediaError(`${name}: contains NaN or infinite samples`, "non_finite");
    }
  }
  return { samples, sampleRate: rate, channels };
}
