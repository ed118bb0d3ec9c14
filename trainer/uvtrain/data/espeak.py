"""``synth-voices``: a multi-speaker corpus spoken by espeak-ng, generated offline.

Real speaker-verification corpora (VoxCeleb) are large, need a licence click-through and cannot be
fetched at run time; the FedUV paper's voice experiments still need hundreds of speakers with a few
utterances each. This module makes such a corpus on the CPU in well under a minute, with the
espeak-ng formant synthesiser whose library and data ship inside the ``espeakng-loader`` wheel (no
system package, no download).

**Speakers.** A speaker is a fixed, distinct combination of

* a base voice (language and accent: British, American, Scottish English, German, French, Polish,
  Turkish, ... — the Latin-script languages of the bundled data, so that digits and words are read
  natively),
* a voice variant of the bundled ``voices/!v`` folder (``m1``..``m8``, ``f1``..``f5``, ``klatt``,
  ``klatt2``..``klatt6``, ``croak``, ``whisper`` and the ~80 named community variants),
* pitch (0–99) and pitch range (0–99, intonation) of espeak-ng, and speaking rate (words/min),
* a vocal-tract scale: the 22.05 kHz output is resampled to 16 kHz as if it had been recorded at
  ``22050 × scale`` Hz, which moves formants and pitch together by ±10 % (a timbre dimension that
  espeak's parameters lack).

Two speakers with the same base voice and variant are kept at least :data:`MIN_PITCH_GAP` pitch
units apart. Each utterance is a random string of digits and words (read with the speaker's own
language rules) with a small jitter of rate, pitch and range; its silence is trimmed, it is cropped
(at a random offset) or repeat-padded to ``clip_seconds`` and peak-normalised to 0.5.

**Reproducibility.** espeak-ng is one global engine per process whose synthesis state (pitch
flutter phase, echo buffer, noise generator) carries over from one utterance to the next, so even
with its random seed fixed the same call does not give the same samples twice in one process. Each
block of :data:`BLOCK_SPEAKERS` speakers is therefore synthesised in a fresh process (``spawn``, one
task per child), in a fixed order, with espeak-ng's and libc's random seeds set per utterance: the
same ``seed`` gives identical arrays whatever the number of workers, and a larger corpus with the
same seed starts with the same speakers and the same audio. Within a process, calls into the engine
are serialised by a lock.

The result is speech a person recognises (digits, words, accents), far more varied than
:mod:`uvtrain.data.formant`, yet still synthetic: a model that verifies these speakers has not
been shown to verify people.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..progress import Progress
from .base import UNKNOWN_FRACTION, DatasetError, FederatedDataset, assemble, fit_length

__all__ = [
    "LICENCE",
    "SpeakerVoice",
    "available_voices",
    "draw_speakers",
    "speak",
    "synth_voices",
    "synthesize_utterance",
]

LICENCE = "synthetic (espeak-ng, GPL-3.0 engine; generated audio unrestricted)"
#: Version of the generator: part of the cache key, bumped whenever the audio it makes changes.
VERSION = 1
#: Sample rate of the corpus, Hz.
SAMPLE_RATE = 16000
#: Sample rate of espeak-ng's output, Hz.
ESPEAK_RATE = 22050
#: Speakers synthesised by one fresh process (see the module docstring).
BLOCK_SPEAKERS = 16
#: Peak amplitude of every clip.
PEAK = 0.5
#: Frames quieter than the loudest frame by more than this (dB) count as silence when trimming.
TRIM_DB = 40.0
#: Silence between the copies of an utterance shorter than the clip, in seconds.
REPEAT_GAP_SECONDS = 0.15
#: Speaker population: pitch, pitch range, rate (words/min) and vocal-tract scale, uniform.
PITCH_LIMITS = (5, 95)
PITCH_RANGE_LIMITS = (10, 90)
RATE_LIMITS = (130, 230)
TRACT_LIMITS = (0.9, 1.1)
#: Two speakers with the same base voice and variant differ in pitch by at least this much.
MIN_PITCH_GAP = 12
#: Per-utterance jitter: relative rate, pitch units and pitch-range units (standard deviations).
RATE_JITTER = 0.04
PITCH_JITTER = 3.0
PITCH_RANGE_JITTER = 5.0

#: Base voices (identifiers under the data's ``lang`` folder) used when present: Latin-script
#: languages, so that the digits and words of an utterance are read with the voice's own rules.
LANGUAGES: tuple[str, ...] = (
    "gmw/en", "gmw/en-US", "gmw/en-GB-x-rp", "gmw/en-GB-scotland", "gmw/en-GB-x-gbclan",
    "gmw/en-GB-x-gbcwmd", "gmw/en-029", "gmw/en-US-nyc", "gmw/de", "gmw/nl", "gmw/af", "gmw/lb",
    "gmq/sv", "gmq/da", "gmq/nb", "gmq/is", "roa/fr", "roa/fr-BE", "roa/fr-CH", "roa/es",
    "roa/es-419", "roa/it", "roa/pt", "roa/pt-BR", "roa/ca", "roa/ro", "zlw/pl", "zlw/cs",
    "zlw/sk", "zls/hr", "zls/sl", "zls/bs", "urj/hu", "urj/fi", "urj/et", "bat/lt", "bat/lv",
    "trk/tr", "poz/id", "poz/ms", "bnt/sw", "art/eo", "itc/la", "cel/cy", "cel/ga", "ine/sq",
)  # fmt: skip
#: Variants left out: a speed test rather than a voice.
EXCLUDED_VARIANTS = frozenset({"fast"})
#: Words of the utterances (read by each language's letter-to-sound rules).
WORDS: tuple[str, ...] = (
    "apple", "river", "green", "table", "window", "music", "summer", "paper", "garden", "yellow",
    "orange", "silver", "doctor", "basket", "rocket", "planet", "forest", "bottle", "coffee",
    "winter", "monday", "friday", "sunday", "market", "pencil", "tiger", "lemon", "camera",
    "hotel", "radio", "piano", "banana", "tomato", "mountain", "island", "bridge", "castle",
    "dinner", "letter", "number", "people", "family", "animal", "water", "morning", "evening",
    "yes", "no", "hello", "thank", "please", "open", "close", "left", "right", "north", "south",
    "red", "blue", "black", "white", "big", "small", "fast", "slow", "hot", "cold", "one", "two",
    "alpha", "bravo", "charlie", "delta", "echo", "golf", "kilo", "lima", "oscar", "papa", "romeo",
    "sierra", "tango", "victor", "zulu", "maria", "anna", "peter", "paul", "london", "berlin",
)  # fmt: skip


@dataclass(frozen=True)
class SpeakerVoice:
    """The identity of one synthetic speaker: what stays fixed across its utterances.

    Parameters
    ----------
    language : str
        Base voice, an identifier under espeak-ng's ``lang`` folder (e.g. ``"gmw/en-US"``).
    variant : str
        Voice variant, a file of the ``voices/!v`` folder (e.g. ``"m3"``, ``"klatt2"``).
    pitch : int
        espeak-ng base pitch, 0–99.
    pitch_range : int
        espeak-ng pitch range (intonation), 0–99.
    rate : int
        Speaking rate, words per minute.
    tract : float
        Vocal-tract scale: formants and pitch are multiplied by it (resampling from
        ``22050 × tract`` Hz).
    """

    language: str
    variant: str
    pitch: int
    pitch_range: int
    rate: int
    tract: float

    @property
    def voice_name(self) -> str:
        """The name given to ``espeak_SetVoiceByName``: ``language+variant``."""
        return f"{self.language}+{self.variant}"

    def resembles(self, other: SpeakerVoice) -> bool:
        """Whether ``other`` is too close to tell apart: same voice, pitch within the gap."""
        return self.voice_name == other.voice_name and abs(self.pitch - other.pitch) < MIN_PITCH_GAP


# --------------------------------------------------------------------------------------------------
# The engine (ctypes over the wheel's libespeak-ng)

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_AUTO = 0
_PARAMETER_RATE, _PARAMETER_VOLUME, _PARAMETER_PITCH, _PARAMETER_RANGE = 1, 2, 3, 4
_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)

_ENGINE_LOCK = threading.Lock()
_ENGINE: _Engine | None = None


def _loader() -> Any:
    """The ``espeakng_loader`` module, or a clear error."""
    try:
        import espeakng_loader
    except ImportError:
        raise DatasetError(
            "synth-voices needs espeak-ng from the espeakng-loader package: "
            "pip install 'uvsdk[train]'"
        ) from None
    return espeakng_loader


class _Engine:
    """This process's espeak-ng: the library loaded, initialised for synchronous output, with a
    callback that collects the samples of the utterance being synthesised. Use under the lock."""

    def __init__(self) -> None:
        loader = _loader()
        library = ctypes.CDLL(loader.get_library_path())
        library.espeak_Initialize.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.set_seed = getattr(library, "espeak_ng_SetRandSeed", None)  # espeak-ng >= 1.52
        if self.set_seed is not None:
            self.set_seed.argtypes = [ctypes.c_long]
        library.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
            ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        data = str(loader.get_data_path()).encode()
        rate = library.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, 0)
        if rate != ESPEAK_RATE:
            raise DatasetError(f"espeak-ng did not initialise (returned {rate}, not {ESPEAK_RATE})")
        self.library = library
        self.chunks: list[np.ndarray] = []
        self.callback = _SynthCallback(self._collect)  # kept alive as long as the engine
        library.espeak_SetSynthCallback(self.callback)
        libc_name = ctypes.util.find_library("c")
        self.libc = ctypes.CDLL(libc_name) if libc_name else None

    def _collect(self, samples: Any, count: int, events: Any) -> int:
        if count > 0 and samples:
            self.chunks.append(np.ctypeslib.as_array(samples, (count,)).copy())
        return 0

    def seed(self, value: int) -> None:
        """Seed espeak-ng's noise generator (and libc's, which some of its code uses)."""
        if self.set_seed is not None:
            self.set_seed(value)
        if self.libc is not None:
            self.libc.srand(ctypes.c_uint(value))

    def synthesize(
        self, text: str, voice: str, rate: int, pitch: int, pitch_range: int
    ) -> np.ndarray:
        """int16 samples at 22.05 kHz of ``text`` spoken by ``voice``."""
        library = self.library
        if library.espeak_SetVoiceByName(voice.encode()) != 0:
            raise DatasetError(f"espeak-ng has no voice {voice!r}")
        for parameter, value in (
            (_PARAMETER_RATE, rate),
            (_PARAMETER_PITCH, pitch),
            (_PARAMETER_RANGE, pitch_range),
            (_PARAMETER_VOLUME, 100),
        ):
            library.espeak_SetParameter(parameter, int(value), 0)
        encoded = text.encode()
        self.chunks = []
        status = library.espeak_Synth(
            encoded, len(encoded) + 1, 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_AUTO, None, None
        )
        if status != 0:
            raise DatasetError(f"espeak-ng failed to speak {text!r} (status {status})")
        chunks, self.chunks = self.chunks, []
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def speak(
    text: str, voice: str, *, rate: int = 175, pitch: int = 50, pitch_range: int = 50, seed: int = 1
) -> np.ndarray:
    """Speak ``text`` with espeak-ng in this process (thread-safe: calls are serialised).

    The engine is global and keeps state between utterances, so the same call repeated in one
    process may differ by a few samples; :func:`synth_voices` gets exact reproducibility by
    synthesising in fresh processes.

    Parameters
    ----------
    text : str
        What to say.
    voice : str
        ``language`` or ``language+variant``, e.g. ``"gmw/en-US+f2"``.
    rate, pitch, pitch_range : int, optional
        Words per minute, base pitch (0–99), pitch range (0–99).
    seed : int, optional
        Seed of espeak-ng's noise generator.

    Returns
    -------
    numpy.ndarray
        float32 mono samples in [-1, 1] at 22.05 kHz.
    """
    global _ENGINE
    with _ENGINE_LOCK:
        if _ENGINE is None:
            _ENGINE = _Engine()
        _ENGINE.seed(seed)
        samples = _ENGINE.synthesize(text, voice, rate, pitch, pitch_range)
    return samples.astype(np.float32) / 32768.0


# --------------------------------------------------------------------------------------------------
# Speakers


def available_voices() -> tuple[list[str], list[str]]:
    """The base voices and variants of the bundled espeak-ng data.

    Returns
    -------
    tuple of (list of str, list of str)
        Base-voice identifiers (files under ``lang``, e.g. ``"gmw/en-US"``) and variant names
        (files of ``voices/!v``), sorted.
    """
    data = Path(_loader().get_data_path())
    languages = sorted(
        path.relative_to(data / "lang").as_posix()
        for path in (data / "lang").rglob("*")
        if path.is_file()
    )
    variants = sorted(path.name for path in (data / "voices" / "!v").iterdir() if path.is_file())
    return languages, variants


def _voice_pools(languages: tuple[str, ...] | None) -> tuple[list[str], list[str]]:
    """Base voices and variants that speakers are drawn from."""
    available, variants = available_voices()
    variants = [
        v for v in variants if v not in EXCLUDED_VARIANTS and not any(c.isspace() for c in v)
    ]
    if languages is None:
        chosen = [language for language in LANGUAGES if language in available] or available
    else:
        by_name = {}
        for identifier in available:
            by_name[identifier.lower()] = identifier
            by_name.setdefault(identifier.rsplit("/", 1)[-1].lower(), identifier)
        missing = [name for name in languages if name.lower() not in by_name]
        if missing:
            raise DatasetError(
                f"espeak-ng has no base voice {missing[0]!r}: one of {', '.join(available)}"
            )
        chosen = [by_name[name.lower()] for name in languages]
    if not chosen or not variants:
        raise DatasetError("the bundled espeak-ng data lists no voices")
    return chosen, variants


def random_speaker(
    rng: np.random.Generator, languages: list[str], variants: list[str]
) -> SpeakerVoice:
    """Draw a speaker uniformly over base voices, variants and the parameter ranges."""
    return SpeakerVoice(
        language=languages[rng.integers(len(languages))],
        variant=variants[rng.integers(len(variants))],
        pitch=int(rng.integers(PITCH_LIMITS[0], PITCH_LIMITS[1] + 1)),
        pitch_range=int(rng.integers(PITCH_RANGE_LIMITS[0], PITCH_RANGE_LIMITS[1] + 1)),
        rate=int(rng.integers(RATE_LIMITS[0], RATE_LIMITS[1] + 1)),
        tract=round(float(rng.uniform(*TRACT_LIMITS)), 4),
    )


def draw_speakers(
    count: int, seed: int = 0, languages: tuple[str, ...] | None = None
) -> list[SpeakerVoice]:
    """Draw ``count`` distinct speakers.

    Speaker ``i`` is drawn from a generator seeded with ``(seed, i)``, redrawn while it resembles
    an earlier speaker (:meth:`SpeakerVoice.resembles`), so the first speakers of a larger corpus
    are those of a smaller one.

    Parameters
    ----------
    count : int
        Number of speakers.
    seed : int, optional
        Seed.
    languages : tuple of str, optional
        Base voices to draw from (identifiers or their last part, e.g. ``"en-US"``); default
        :data:`LANGUAGES` (those present).

    Returns
    -------
    list of SpeakerVoice
        The speakers, in order.
    """
    pool_languages, pool_variants = _voice_pools(languages)
    speakers: list[SpeakerVoice] = []
    by_voice: dict[str, list[SpeakerVoice]] = {}
    for index in range(count):
        rng = np.random.default_rng([seed, index, 0])
        for _ in range(1000):
            candidate = random_speaker(rng, pool_languages, pool_variants)
            if not any(
                candidate.resembles(other) for other in by_voice.get(candidate.voice_name, [])
            ):
                break
        speakers.append(candidate)
        by_voice.setdefault(candidate.voice_name, []).append(candidate)
    return speakers


# --------------------------------------------------------------------------------------------------
# Utterances


def utterance_text(rng: np.random.Generator, rate: float, seconds: float) -> str:
    """Random digits and words, enough for about 1.3 × ``seconds`` at ``rate`` words/min."""
    count = math.ceil(seconds * rate / 60.0 * 1.3) + 1
    tokens = [
        str(rng.integers(10)) if rng.random() < 0.5 else WORDS[rng.integers(len(WORDS))]
        for _ in range(count)
    ]
    return " ".join(tokens)


def trim_silence(signal: np.ndarray, sample_rate: int, threshold_db: float = TRIM_DB) -> np.ndarray:
    """Drop the leading and trailing 10 ms frames quieter than the loudest by ``threshold_db``."""
    frame = max(sample_rate // 100, 1)
    count = signal.size // frame
    if count == 0:
        return signal
    rms = np.sqrt(np.mean(signal[: count * frame].reshape(count, frame) ** 2, axis=1))
    active = np.flatnonzero(rms > rms.max() * 10.0 ** (-threshold_db / 20.0))
    if active.size == 0:
        return signal[:0]
    return signal[active[0] * frame : (active[-1] + 1) * frame]


def synthesize_utterance(
    speaker: SpeakerVoice,
    seed: int,
    speaker_index: int,
    utterance: int,
    clip_seconds: float,
    attempt: int = 0,
) -> np.ndarray:
    """One clip of ``speaker``: text and jitter from ``(seed, speaker_index, utterance, attempt)``.

    ``attempt`` > 0 draws another text after espeak-ng crashed on the previous one.

    Returns
    -------
    numpy.ndarray
        float32 ``[round(clip_seconds * 16000)]``, peak :data:`PEAK`.
    """
    import soxr

    key = [seed, speaker_index, utterance, 1] + ([attempt] if attempt else [])
    rng = np.random.default_rng(key)
    rate = int(round(speaker.rate * np.exp(rng.normal(0.0, RATE_JITTER))))
    pitch = int(np.clip(round(speaker.pitch + rng.normal(0.0, PITCH_JITTER)), 0, 99))
    pitch_range = int(
        np.clip(round(speaker.pitch_range + rng.normal(0.0, PITCH_RANGE_JITTER)), 0, 99)
    )
    text = utterance_text(rng, rate, clip_seconds)
    raw = speak(
        text,
        speaker.voice_name,
        rate=rate,
        pitch=pitch,
        pitch_range=pitch_range,
        seed=int(rng.integers(1, 2**31 - 1)),
    )
    if raw.size == 0:
        raise DatasetError(f"espeak-ng produced no audio for {speaker.voice_name!r}")
    signal = soxr.resample(raw, ESPEAK_RATE * speaker.tract, SAMPLE_RATE, quality="HQ")
    signal = trim_silence(np.asarray(signal, dtype=np.float32), SAMPLE_RATE)
    if signal.size == 0:
        raise DatasetError(f"espeak-ng produced silence for {speaker.voice_name!r}")
    length = int(round(clip_seconds * SAMPLE_RATE))
    offset = int(rng.integers(0, max(signal.size - length, 0) + 1))
    clip = fit_length(signal, length, offset, gap=int(REPEAT_GAP_SECONDS * SAMPLE_RATE))
    return (clip * (PEAK / max(float(np.max(np.abs(clip))), 1e-9))).astype(np.float32)


# --------------------------------------------------------------------------------------------------
# Blocks of speakers, each synthesised by a fresh process

#: Crashes of espeak-ng on one utterance before its speaker is replaced, and replacements of one
#: speaker before giving up.
MAX_ATTEMPTS = 3
MAX_REPLACEMENTS = 5


@dataclass
class _Block:
    """Speakers ``first ..`` of the corpus and what espeak-ng crashed on so far."""

    first: int
    speakers: list[SpeakerVoice]
    utterances: int
    clip_seconds: float
    seed: int
    attempts: dict[tuple[int, int], int]
    replacements: dict[int, int]
    crashes: int = 0

    def request(self) -> str:
        """The block as the JSON the child process reads."""
        return json.dumps(
            {
                "first": self.first,
                "speakers": [asdict(speaker) for speaker in self.speakers],
                "utterances": self.utterances,
                "clip_seconds": self.clip_seconds,
                "seed": self.seed,
                "attempts": [[i, j, n] for (i, j), n in self.attempts.items()],
            }
        )

    def crashed(
        self, speaker_index: int, utterance: int, pool: tuple[list[str], list[str]]
    ) -> None:
        """Record a crash: redraw the utterance's text, or after :data:`MAX_ATTEMPTS` crashes the
        speaker (deterministically, from ``(seed, speaker_index, replacement)``)."""
        self.crashes += 1
        key = (speaker_index, utterance)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] < MAX_ATTEMPTS:
            return
        count = self.replacements.get(speaker_index, 0) + 1
        if count > MAX_REPLACEMENTS:
            raise DatasetError(
                f"espeak-ng keeps crashing on speaker {speaker_index}: try another seed"
            )
        self.replacements[speaker_index] = count
        self.attempts = {k: n for k, n in self.attempts.items() if k[0] != speaker_index}
        rng = np.random.default_rng([self.seed, speaker_index, 2, count])
        self.speakers[speaker_index - self.first] = random_speaker(rng, *pool)


def _synthesize_request(request: dict[str, Any]) -> np.ndarray:
    """The child's work: every utterance of the block, in order, announced on stdout first (so that
    the parent knows where espeak-ng crashed, if it does)."""
    attempts = {(i, j): n for i, j, n in request["attempts"]}
    speakers = [SpeakerVoice(**fields) for fields in request["speakers"]]
    first, seed = request["first"], request["seed"]
    block = np.empty(
        (len(speakers), request["utterances"], int(round(request["clip_seconds"] * SAMPLE_RATE))),
        dtype=np.float32,
    )
    for offset, speaker in enumerate(speakers):
        index = first + offset
        for utterance in range(request["utterances"]):
            print(index, utterance, flush=True)
            attempt = attempts.get((index, utterance), 0)
            block[offset, utterance] = synthesize_utterance(
                speaker, seed, index, utterance, request["clip_seconds"], attempt
            )
    return block


def _child_environment() -> dict[str, str]:
    """The environment of a child: this one, with this package's folder first on the path."""
    environment = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    environment["PYTHONPATH"] = os.pathsep.join(
        [package_root, *filter(None, [environment.get("PYTHONPATH")])]
    )
    return environment


def _crash_position(returncode: int, stdout: str) -> tuple[int, int] | None:
    """``(speaker, utterance)`` a child died on by a signal (a crash in espeak-ng), else None."""
    crashed = returncode < 0 or returncode >= 0xC0000000  # POSIX signal, Windows exception code
    lines = stdout.split()
    if not crashed or len(lines) < 2:
        return None
    return int(lines[-2]), int(lines[-1])


def _run_block(block: _Block, folder: str, pool: tuple[list[str], list[str]]) -> np.ndarray:
    """Synthesise one block in fresh processes until one finishes without a crash."""
    output = Path(folder) / f"block{block.first}.npy"
    while True:
        result = subprocess.run(
            [sys.executable, "-m", "uvtrain.data.espeak", str(output)],
            input=block.request(),
            capture_output=True,
            text=True,
            env=_child_environment(),
        )
        if result.returncode == 0:
            audio = np.load(output)
            output.unlink()
            return audio
        position = _crash_position(result.returncode, result.stdout)
        if position is None:
            last = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise DatasetError(f"synth-voices: the synthesis process failed: {last}")
        block.crashed(*position, pool)


def _worker_count(workers: int | None, blocks: int) -> int:
    if workers is None:
        try:
            workers = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            workers = os.cpu_count() or 1
    return max(1, min(workers, blocks))


def synth_voices(
    speakers: int = 300,
    utterances: int = 16,
    clip_seconds: float = 2.0,
    seed: int = 0,
    *,
    languages: tuple[str, ...] | None = None,
    unknown_fraction: float = UNKNOWN_FRACTION,
    workers: int | None = None,
    progress: bool = True,
) -> FederatedDataset:
    """Generate the ``synth-voices`` corpus (see the module docstring).

    espeak-ng has rare crashing bugs (a few voice, pitch and word combinations dereference bad
    memory); a block whose process crashes is synthesised again from its start with another text for
    the utterance it crashed on (after :data:`MAX_ATTEMPTS` crashes, another speaker), so the result
    stays a deterministic function of the parameters.

    Parameters
    ----------
    speakers : int, optional
        Number of speakers (identities).
    utterances : int, optional
        Utterances per speaker, split 10/3/3 of 16 (``max(1, round(0.2 n))`` to validation and
        to test, the rest to train).
    clip_seconds : float, optional
        Length of every clip.
    seed : int, optional
        Seed of everything: the same seed gives identical arrays.
    languages : tuple of str, optional
        Base voices to draw speakers from; default :data:`LANGUAGES`.
    unknown_fraction : float, optional
        Fraction of the speakers held out of training (the FedUV paper's unknown users).
    workers : int, optional
        Processes synthesising in parallel; default the available cores. Does not change the result.
    progress : bool, optional
        Show a progress bar.

    Returns
    -------
    FederatedDataset
        Audio, float32 ``[n, round(clip_seconds * 16000)]`` per split; identities ``spk00000``...
    """
    if speakers < 2 or utterances < 3 or clip_seconds < 0.5:
        raise DatasetError("synth-voices needs at least 2 speakers, 3 utterances and 0.5 s clips")
    pool = _voice_pools(languages)
    voices = draw_speakers(speakers, seed, languages)
    blocks = [
        _Block(
            first, voices[first : first + BLOCK_SPEAKERS], utterances, clip_seconds, seed, {}, {}
        )
        for first in range(0, speakers, BLOCK_SPEAKERS)
    ]
    results: dict[int, np.ndarray] = {}
    bar = Progress("synth-voices", speakers, unit="speaker", enabled=progress)
    with (
        bar,
        tempfile.TemporaryDirectory(prefix="synth-voices-") as folder,
        ThreadPoolExecutor(_worker_count(workers, len(blocks))) as executor,
    ):
        futures = {executor.submit(_run_block, block, folder, pool): block for block in blocks}
        for future in as_completed(futures):
            results[futures[future].first] = future.result()
            bar.update(len(futures[future].speakers))
    voices = [voice for block in blocks for voice in block.speakers]
    samples = {
        f"spk{block.first + offset:05d}": clips
        for block in blocks
        for offset, clips in enumerate(results[block.first])
    }
    spec = {
        "sample_rate": SAMPLE_RATE,
        "window_seconds": clip_seconds,
        "hop_seconds": clip_seconds / 2,
        "min_seconds": min(0.5, clip_seconds),  # a valid input (uvsdk.inputs) for short clips
    }
    extra = {
        "generator": f"uvtrain.data.espeak v{VERSION}",
        "params": {
            "speakers": speakers,
            "utterances": utterances,
            "clip_seconds": clip_seconds,
            "seed": seed,
        },
        "speakers": {f"spk{i:05d}": asdict(voice) for i, voice in enumerate(voices)},
        "espeak_crashes": sum(block.crashes for block in blocks),
        "replaced_speakers": sorted(f"spk{i:05d}" for b in blocks for i in b.replacements),
    }
    return assemble(
        "synth-voices",
        "audio",
        spec,
        samples,
        unknown_fraction=unknown_fraction,
        seed=seed,
        licence=LICENCE,
        extra=extra,
    )


def _main() -> None:
    """Child process: read a block request (JSON) on stdin, save its audio to ``argv[1]``."""
    request = json.loads(sys.stdin.read())
    np.save(sys.argv[1], _synthesize_request(request))


if __name__ == "__main__":
    _main()
