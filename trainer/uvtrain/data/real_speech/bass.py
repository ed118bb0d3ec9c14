"""Beneath a Steel Sky's talkie (Debian ``beneath-a-steel-sky``, the ``bass`` real-speech source):
its speech files, read from ``sky.dsk`` (``sky.dnr`` the index; RNC ProPack method 1 inside,
decoded by the ``propack`` package), and who speaks each line, from the game scripts' ``fnSpeak*``
calls and the talk animations' names in ``sky.cpt`` (ScummVM's ``engines/sky``)."""

from __future__ import annotations

import struct
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

from ...errors import DatasetError

ROOT = "usr/share/scummvm/beneath-a-steel-sky"
#: sky.dnr's entries: file number (u16), offset (u24), flags (u24), little-endian.
ENTRY = 8
#: The game scripts (16-bit bytecode, ScummVM ``Logic::script``) and the first speech file.
SCRIPTS = range(60400, 60407)
SPEECH = 50000
#: Text number -> speech file: ``SPEECH + SECTIONS[text >> 12] + (text & 0xFFF)``
#: (ScummVM ``engines/sky/sound.cpp``).
SECTIONS = (0, 600, 1100, 2430, 3380, 4530, 5080, 5230)
#: The compact id of the talk table in sky.cpt: talk animation number -> compact id.
TALK_TABLE = 0xBC
#: The mcodes that speak a text (``fnSpeakMe``, ``fnSpeakMeDir``, ``fnSpeakWait``,
#: ``fnSpeakWaitDir``), called as ``push target; push text; push animation; call_mcode 3, n*4``.
SPEAK_MCODES = frozenset({35, 36, 37, 38})
CALL_MCODE, PUSH_NUMBER = 11, 2
#: The kept characters' talk animations (compact names in sky.cpt), one character per voice. The
#: credits name four actors ("W Marsh, H Ellerby, C Daish, H Ormrod", cut short in the data) and
#: no actor per character, so the voices are told apart by measurement: taking the characters by
#: their number of lines of 2 s or more, each is kept when both CAM++ and GE2E keep it apart from
#: every character kept before it (pairwise EER under 0.20 and 0.25: Flight of the Amazon Queen's
#: credited actors reach 0.26 under GE2E, one actor's characters there 0.31-0.40). The seven kept
#: score at most 0.18 and 0.23 (median 0.04 and 0.14): ``benchmarks/bass_voices.py`` measures it.
#: ``dad_to_foster`` and ``son_to_foster`` are the father's and son's animations, not Foster's.
SPEAKERS = {
    "smlfost_conv": "foster",
    "lamb_normal": "lamb",
    "lamb_talk_right": "lamb",
    "dani_conv": "danielle",
    "sc38_dani_sattlk": "danielle",
    "sc42_dani_talk": "danielle",
    "sc42_judge_talk": "judge",
    "sc42_judge_point": "judge",
    "sc42_jdg_to_jobs": "judge",
    "anchor_talk_anim": "anchor",
    "anchor_talk2_anim": "anchor",
    "anchor_talk3_anim": "anchor",
    "sc30_henri_talk": "henri",
    "helga1": "helga",
    "helga2": "helga",
    "helga3": "helga",
}
RATE = 11025
#: The package's files the source unpacks.
MEMBERS = tuple(f"{ROOT}/sky.{kind}" for kind in ("dnr", "dsk", "cpt"))


class Game:
    """sky.dsk's files by number and sky.cpt's compact names and data (ScummVM's
    ``SkyCompact``)."""

    def __init__(self, tree: Path):
        root = tree / ROOT
        index = (root / "sky.dnr").read_bytes()
        if len(index) < 4:
            raise DatasetError("sky.dnr: too short")
        count = struct.unpack_from("<I", index)[0]
        if 4 + count * ENTRY > len(index):
            raise DatasetError("sky.dnr: its table runs past the end of the file")
        self.entries = {}
        for start in range(4, 4 + count * ENTRY, ENTRY):
            number = struct.unpack_from("<H", index, start)[0]
            offset = int.from_bytes(index[start + 2 : start + 5], "little")
            flags = int.from_bytes(index[start + 5 : start + 8], "little")
            self.entries[number] = (offset, flags)
        self.disk = (root / "sky.dsk").read_bytes()
        self.names, self.data = self._compacts((root / "sky.cpt").read_bytes())

    def file(self, number: int) -> bytes:
        """File ``number`` with its 22-byte header, decompressed."""
        try:
            import propack
        except ImportError:
            raise DatasetError(
                "Beneath a Steel Sky's speech needs the propack package: pip install propack "
                "(part of the train extra)"
            ) from None

        if number not in self.entries:
            raise DatasetError(f"sky.dnr: no file {number}")
        offset, flags = self.entries[number]
        start = (offset & 0x7FFFFF) << (4 if offset >> 23 & 1 else 0)
        raw = self.disk[start : start + (flags & 0x3FFFFF)]
        if len(raw) < 22 or start + (flags & 0x3FFFFF) > len(self.disk):
            raise DatasetError(f"sky.dsk: file {number} runs past the end of the container")
        if flags >> 23 & 1 or not struct.unpack_from("<H", raw)[0] >> 7 & 1:
            return raw  # stored uncompressed
        try:
            body = propack.unpack(raw[22:])
        except Exception as exc:
            raise DatasetError(f"sky.dsk: file {number} does not decompress ({exc})") from None
        return body if flags >> 22 & 1 else raw[:22] + body

    @staticmethod
    def _compacts(cpt: bytes) -> tuple[dict[int, str], dict[int, tuple[int, ...]]]:
        try:
            at = 2
            lists = struct.unpack_from("<H", cpt, at)[0]
            sizes = struct.unpack_from(f"<{lists}H", cpt, at + 2)
            at += 2 + 2 * lists + 4  # the list sizes, then the raw size (unused)
            words = struct.unpack_from("<I", cpt, at)[0]
            source = struct.unpack_from(f"<{words}H", cpt, at + 4)
            at += 4 + 2 * words
            length = struct.unpack_from("<I", cpt, at)[0]
            text = cpt[at + 4 : at + 4 + length].split(b"\0")
            at += 4 + length
            aliases = struct.unpack_from("<H", cpt, at)[0]
            pairs = struct.unpack_from(f"<{2 * aliases}H", cpt, at + 2)
        except struct.error:
            raise DatasetError("sky.cpt: truncated") from None
        names: dict[int, str] = {}
        data: dict[int, tuple[int, ...]] = {}
        word = name = 0
        try:
            for group, size in enumerate(sizes):
                for element in range(size):
                    length = source[word]
                    word += 1
                    if length:
                        compact = group << 12 | element
                        names[compact] = text[name].decode("latin-1")
                        data[compact] = source[word + 1 : word + 1 + length]  # after its type
                        word += 1 + length
                        name += 1
            for alias, compact in zip(pairs[::2], pairs[1::2], strict=True):  # another's data
                names[alias] = text[name].decode("latin-1")
                data[alias] = data.get(compact, ())
                name += 1
        except IndexError:
            raise DatasetError("sky.cpt: fewer names or words than its lists say") from None
        return names, data

    def speech_calls(self) -> Iterator[tuple[int, str | None, int | None]]:
        """(text, talk animation's compact name, target compact) for every ``fnSpeak*`` call in
        the scripts whose text is a constant; the animation or target ``None`` where a variable
        gives it."""
        table = self.data.get(TALK_TABLE, ())
        for module in SCRIPTS:
            script = self.file(module)
            words = struct.unpack_from(f"<{len(script) // 2}H", script)
            for i in range(6, len(words) - 2):
                if not (
                    words[i : i + 2] == (CALL_MCODE, 3)
                    and words[i + 2] % 4 == 0
                    and words[i + 2] // 4 in SPEAK_MCODES
                    and words[i - 4] == PUSH_NUMBER  # the text
                ):
                    continue
                animation = None
                if words[i - 2] == PUSH_NUMBER and words[i - 1] < len(table):
                    animation = self.names.get(table[words[i - 1]], "")
                target = words[i - 5] if words[i - 6] == PUSH_NUMBER else None
                yield words[i - 3], animation, target

    def speech(self, text: int) -> bytes | None:
        """Text ``text``'s speech (unsigned 8-bit mono PCM at :data:`RATE`), or ``None`` when
        the game has no speech file for it."""
        number = SPEECH + SECTIONS[text >> 12 & 7] + (text & 0xFFF)
        return self.file(number)[22:] if number in self.entries else None


def lines(game: Game, speaker_of: Callable[[str], str | None]) -> dict[str, list[int]]:
    """Each speaker's texts: those whose every ``fnSpeak*`` call names an animation
    ``speaker_of`` gives that speaker. A text another speaker's animation also claims, or one a
    named character speaks with an animation of a variable, is left out; ``speaker_of`` gives
    ``None`` for an animation of nobody kept."""
    claims: dict[int, set[str | None]] = {}
    for text, animation, target in game.speech_calls():
        if animation is not None:  # the talk animation names the speaker
            claims.setdefault(text, set()).add(speaker_of(animation))
        elif target is not None:  # a named character speaks with an animation of a variable
            claims.setdefault(text, set()).add(None)
    by_speaker: dict[str, list[int]] = {}
    for text, (speaker, *others) in sorted(claims.items()):
        if not others and speaker is not None:
            by_speaker.setdefault(speaker, []).append(text)
    return by_speaker


def write_wav(path: Path, pcm: bytes) -> Path:
    """``pcm`` (as :meth:`Game.speech` gives it) as a WAV file."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(RATE)
        out.writeframes(pcm)
    return path


def clips(tree: Path) -> Iterator[tuple[str, str, Path]]:
    """The kept characters' lines (:data:`SPEAKERS`), each written to a WAV file of its own:
    the source's ``clips``."""
    game = Game(tree)
    audio = tree / "bass-speech"
    audio.mkdir(exist_ok=True)
    for speaker, texts in lines(game, SPEAKERS.get).items():
        for text in texts:
            pcm = game.speech(text)
            if pcm is not None:
                path = write_wav(audio / f"{text:05d}.wav", pcm)
                yield speaker, path.stem, path
