// AudioWorklet processor: mixes each render quantum of the microphone to mono (the mean of the
// channels) and posts it to the page. The page stops it with the message "stop".
class UvsdkRecorder extends AudioWorkletProcessor {
  constructor() {
    super();
    this.active = true;
    this.port.onmessage = (event) => {
      if (event.data === "stop") this.active = false;
    };
  }

  process(inputs) {
    const channels = inputs[0];
    if (this.active && channels && channels.length > 0) {
      const n = channels[0].length;
      const mono = new Float32Array(n);
      for (const channel of channels) for (let i = 0; i < n; i++) mono[i] += channel[i];
      if (channels.length > 1) for (let i = 0; i < n; i++) mono[i] /= channels.length;
      this.port.postMessage(mono, [mono.buffer]);
    }
    return this.active;
  }
}

registerProcessor("uvsdk-recorder", UvsdkRecorder);
