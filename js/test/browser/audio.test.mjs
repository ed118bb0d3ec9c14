// The page's resampler (web/audio.js: decodeAudioData of an OfflineAudioContext) in Chromium:
// band-limited, not linear interpolation. 48 kHz -> 16 kHz: a 1 kHz tone passes, a 10 kHz tone
// (above the new Nyquist, which would alias to 6 kHz) is at least 30 dB down.
import { test } from "node:test";
import assert from "node:assert/strict";
import { serveAndLaunch, skipOption } from "./chromium.mjs";

test("resample 48 kHz -> 16 kHz in Chromium is band-limited", { skip: skipOption() }, async (t) => {
  const { server, browser } = await serveAndLaunch(t);
  const page = await browser.newPage();
  await page.goto(server.url, { waitUntil: "commit", timeout: 0 }); // the resampling below is one evaluate: no clock
  const result = await page.evaluate(async () => {
    const audio = await import("/web/audio.js");
    const rms = {};
    let length = 0;
    for (const f of [1000, 10000]) {
      const x = Float32Array.from({ length: 48000 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * f * i) / 48000));
      const y = await audio.resample(x, 48000, 16000);
      length = y.length;
      let s = 0;
      for (let i = 1000; i < y.length - 1000; i++) s += y[i] * y[i];
      rms[f] = Math.sqrt(s / (y.length - 2000));
    }
    return { rms, length };
  });
  const input = 0.5 / Math.SQRT2;
  assert.equal(result.length, 16000);
  assert.ok(Math.abs(result.rms[1000] / input - 1) < 0.01, `1 kHz: ${result.rms[1000]}`);
  assert.ok(20 * Math.log10(result.rms[10000] / input) < -30, `10 kHz: ${result.rms[10000]}`);
});
