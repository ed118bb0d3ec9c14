"""The real-speech sources: each pinned Debian package, the files of it that are voices, and
who speaks each (:data:`SOURCES`); :mod:`.fetch` downloads and writes them. Every speaker's
gender and language, with how each was determined, are in ``labels.json`` beside this file
(:data:`LABELS`)."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ...errors import DatasetError
from . import bass

#: Clips shorter than this (seconds) are left out: too short to say anything of a voice.
MIN_SECONDS = 0.5

#: (speaker, clip name, file): what a source's ``clips`` function yields for an extracted tree.
ClipRef = tuple[str, str, Path]

#: The gender labels a speaker can have.
GENDERS = ("female", "male", "child", "unknown")

#: ``labels.json``: per source, per speaker (as the source's ``clips`` names them): ``gender``
#: (one of :data:`GENDERS`) and ``gender_from`` (how: the credit, the measured median F0 of
#: :mod:`.pitch`, or why it is unknown), ``language`` (ISO 639-1, or 639-2/3 where 639-1 has no
#: code) and ``language_from``, and the measured ``f0_hz``, ``f0_spread`` and ``f0_clips``. The
#: file's ``about``, ``f0_method`` and ``f0_thresholds`` say how the labels were decided.
LABELS_FILE = Path(__file__).with_name("labels.json")
_LABELS = json.loads(LABELS_FILE.read_text(encoding="utf-8"))
LABELS: dict[str, dict[str, dict[str, Any]]] = _LABELS["sources"]
#: How the labels were decided (written into SOURCES.md by the fetch).
LABELS_ABOUT: dict[str, str] = {key: value for key, value in _LABELS.items() if key != "sources"}


def safe_path(base: Path, name: str) -> Path:
    """``base/name`` for a member name that stays inside ``base``."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or name.startswith("/"):
        raise DatasetError(f"unsafe path {name!r} in the package")
    return base.joinpath(*parts)


@dataclass(frozen=True)
class Package:
    """A pinned ``.deb`` and the paths a source takes out of it."""

    package: str
    version: str
    arch: str
    sha256: str
    #: Path prefixes (inside the package) to extract; nothing else is unpacked.
    members: tuple[str, ...]

    @property
    def filename(self) -> str:
        """The ``.deb``'s file name as ``apt-get download`` writes it (epoch ``:`` as ``%3a``)."""
        return f"{self.package}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


@dataclass(frozen=True)
class Source:
    """One package of recorded voices (and any further packages it needs) and how its files map
    to speakers."""

    name: str
    package: str
    version: str
    arch: str
    sha256: str
    licence: str
    description: str
    #: Why the folders are taken to be one person each (credits, docs).
    evidence: str
    #: Path prefixes (inside the package) to extract; nothing else is unpacked.
    members: tuple[str, ...]
    #: Extracted tree -> (speaker, clip name, file) for every clip of every kept speaker.
    clips: Callable[[Path], Iterable[ClipRef]]
    #: What was left out, and why (shown in SOURCES.md).
    notes: str = ""
    #: Raised when the selection of clips changes: folders written under another are rewritten.
    revision: int = 1
    #: Further pinned packages unpacked into the same tree (more voices, or the game scripts
    #: that say who speaks which line).
    extra: tuple[Package, ...] = ()
    #: Clips shorter than this (seconds) are left out (sentence-length sources ask for more).
    min_seconds: float = MIN_SECONDS
    #: Speaker -> gender and language labels and how each was determined (:data:`LABELS`).
    labels: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)

    @property
    def filename(self) -> str:
        """The ``.deb``'s file name as ``apt-get download`` writes it (epoch ``:`` as ``%3a``)."""
        return self.packages[0].filename

    @property
    def packages(self) -> tuple[Package, ...]:
        """The source's own package, then its :attr:`extra` ones."""
        own = Package(self.package, self.version, self.arch, self.sha256, self.members)
        return (own, *self.extra)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "package": self.package,
            "version": self.version,
            "arch": self.arch,
            "sha256": self.sha256,
            "extra": [
                {"package": p.package, "version": p.version, "arch": p.arch, "sha256": p.sha256}
                for p in self.extra
            ],
            "licence": self.licence,
            "description": self.description,
            "evidence": self.evidence,
            "notes": self.notes,
            "min_seconds": self.min_seconds,
        }


# --- the sources' maps ----------------------------------------------------------------------


def _files(folder: Path, patterns: Iterable[str]) -> list[Path]:
    return sorted({path for pattern in patterns for path in folder.glob(pattern) if path.is_file()})


#: KLettres: the language folders kept, one speaker each. Credited to one person in the KLettres
#: handbook: cs (Eva Mikulčíková), da (Erik Kjaer Pedersen), de (Helmut Kriege), en (Robert
#: Wadley), fr (Ludovic Grossard), he (Assaf Gorgon), it (Pietro Pasotti), nl (Geert Stams).
#: Uncredited, one voice by GE2E and near no other folder: ar, hu, lt, ml, nb, ru, uk. Left out:
#: es, pt_BR and nds (the handbook credits two people each), tn (uncredited; GE2E puts it with
#: pt_BR), en_GB (uncredited; GE2E puts it with nl, Geert Stams).
KLETTRES_LANGUAGES = (
    "ar", "cs", "da", "de", "en", "fr", "he", "hu", "it", "lt", "ml", "nb", "nl", "ru", "uk",
)  # fmt: skip

KLETTRES_ROOT = "usr/share/klettres"


def _klettres(tree: Path) -> Iterator[ClipRef]:
    base = tree / KLETTRES_ROOT
    for language in KLETTRES_LANGUAGES:
        for path in _files(base / language, ("alpha/*.ogg", "syllab/*.ogg")):
            yield language, f"{path.parent.name}-{path.stem}", path


ALSA_ROOT = "usr/share/sounds/alsa"


def _alsa(tree: Path) -> Iterator[ClipRef]:
    for path in _files(tree / ALSA_ROOT, ("Front_*.wav", "Rear_*.wav", "Side_*.wav")):
        yield "voice", path.stem, path


#: KTuberling: the sound themes kept, one speaker each: the 13 words of the original potato-guy
#: game, which every theme has, recorded together by the theme's translator. The words added to
#: that playground later (ball, coat, flower, shoe, ...) and the later playgrounds' words (Egypt,
#: moon, TV, Christmas, robot, ...) are left out: within one language they are often another
#: voice (GE2E: French's added words; Catalan, Danish, Russian, Ukrainian later playgrounds). ``id``
#: has no files; the four Serbian themes are the same files (kept once, as ``sr``).
KTUBERLING_LANGUAGES = (
    "ca", "da", "de", "el", "en", "es", "fi", "fr", "ga", "gl", "it", "lt", "nds", "nl", "nn",
    "pt", "ro", "ru", "sl", "sr", "sv", "uk", "wa",
)  # fmt: skip
KTUBERLING_WORDS = frozenset((
    "bow", "ear", "earring", "eye", "eyebrow", "hair", "hat", "moustache", "mouth", "nose",
    "spectacles", "sunglasses", "tie",
))  # fmt: skip

KTUBERLING_ROOT = "usr/share/ktuberling/sounds"


def _ktuberling(tree: Path) -> Iterator[ClipRef]:
    base = tree / KTUBERLING_ROOT
    for language in KTUBERLING_LANGUAGES:
        try:
            theme = ElementTree.parse(base / f"{language}.soundtheme").getroot()
        except (OSError, ElementTree.ParseError) as error:
            message = f"ktuberling-data: cannot read {language}.soundtheme ({error})"
            raise DatasetError(message) from None
        for sound in theme.iter("sound"):
            name, file = sound.get("name"), sound.get("file")
            if name in KTUBERLING_WORDS and file:
                yield language, name, safe_path(base, file)


#: Hedgewars voice packs kept -> speaker. The game's credits name one actor, Stephen Alexander,
#: for the hedgehogs' voice: ``Default`` and ``Classic`` (his plain voice) are kept as one
#: speaker; his character packs (British, Mobster, Pirate, Russian, Singer, Surfer) are acted
#: accents of the same person and ``Robot`` is processed: left out. ``Default_pl`` is credited to
#: mtg90pl (his acted ``Russian_pl`` left out). ``Default_es``, ``Default_ru``, ``Default_uk``
#: and ``HillBilly`` are uncredited and GE2E cannot tell them from Stephen Alexander's packs: left
#: out. (``Default_es`` was kept until revision 2 as "one voice and near no other pack"; on the
#: shipped model its centroid is 0.950 from Stephen Alexander's, the closest pair of names in the
#: corpus, and the pairwise EER of their clips is 0.44: most likely the same actor, so its trials
#: against him were genuine pairs counted as impostors. docs/model-card.md.)
HEDGEWARS_SPEAKERS = {
    "Default": "stephen-alexander",
    "Classic": "stephen-alexander",
    "Default_pl": "mtg90pl",
}
#: Hedgewars clips that are not words: punches, jumps, grunts, laughs, coughs, moans.
HEDGEWARS_NOT_SPEECH = re.compile(r"^(Firepunch\d|Jump\d|Ooff\d|Ow\d|Laugh|Poison\w+|Hmm|Nooo)$")

HEDGEWARS_ROOT = "usr/share/games/hedgewars/Data/Sounds/voices"


def _hedgewars(tree: Path) -> Iterator[ClipRef]:
    base = tree / HEDGEWARS_ROOT
    for pack, speaker in HEDGEWARS_SPEAKERS.items():
        for path in _files(base / pack, ("*.ogg",)):
            if not HEDGEWARS_NOT_SPEECH.match(path.stem):
                yield speaker, f"{pack}-{path.stem}", path


WARZONE_ARCHIVE = "usr/share/games/warzone2100/base.wz"
#: Warzone 2100 (inside base.wz, a zip): speaker -> its voiced lines. No credits name the voices;
#: the roles' folders are: the status messages and the tutorial (one voice: GE2E centroids 0.98),
#: and the commander's reports with the countdowns: one voice. Their centroids are 0.88 apart,
#: but clip by clip a commander clip and a countdown clip score 0.72 (GE2E cosine, mean), as
#: close as two commander clips (0.76) and far above the announcer (0.46-0.49); kept apart they
#: made 1 % of the "impostor" trials score like the same person (benchmarks/far_generalisation.py).
#: Left out: the taunts and VTOL pilots (three numbered variants of the same lines, which GE2E
#: does not keep apart), the transport pilot (5 clips), NEXUS (a processed voice), ``extra`` and
#: the proximity messages (likely the announcer again, but not needed).
WARZONE_SPEAKERS: dict[str, tuple[str, ...]] = {
    "announcer": ("memressp/*/pcv*.ogg", "tutorial/*.ogg"),
    "commander": ("memressp/cmndrvoc/*.ogg", "countdown/*.ogg"),
}


def _warzone(tree: Path) -> Iterator[ClipRef]:
    archive = tree / WARZONE_ARCHIVE
    audio = tree / "warzone-audio"
    if not audio.is_dir():
        with zipfile.ZipFile(archive) as wz:
            for info in wz.infolist():
                if info.filename.startswith("audio/") and info.filename.endswith(".ogg"):
                    target = safe_path(audio, info.filename[len("audio/") :])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(wz.read(info))
    for speaker, patterns in WARZONE_SPEAKERS.items():
        for path in _files(audio, patterns):
            yield speaker, f"{path.parent.name}-{path.stem}", path


TUXPAINT_ROOT = "usr/share/tuxpaint/stamps"
#: Tux Paint stamps' spoken descriptions ("<stamp>_desc_<language>.ogg"): speaker -> (language,
#: byte strings that must all be in the file's Ogg headers, which tell recording batches apart).
#: The changelog credits one person per language's descriptive sounds: be Kseniya Buraya, bg
#: Krasimir Petkov, da Joe Dalton, el Kiriaki Serafeim, es Estefanía Ortiz, ro Tabbytha, ru Edwin
#: Veber (Google Code-In students, most of them), and Catalan "spoken translations of all stamps".
#: French is credited to two people, Jacques Chion (earlier) and PaulK (Google Code-In): its files
#: fall in two libvorbis batches, 2007 (68 files) and 2010 (681), which GE2E puts apart (centroid
#: cosine 0.68) and each of which is one voice: two speakers. Catalan keeps its files of the 2005
#: batch that SoX processed (345): the batch's other files (58 animals) are another voice (GE2E
#: 0.73), and the 2007 and 2010 batches are 0.90 and 0.83 from it (maybe other people). Letters
#: and numbers (symbols/alphabets, symbols/math) are left out: others recorded them (Schoolsplay,
#: a son, a Greek team). Dutch, Lithuanian, Malayalam and the English files are uncredited.
TUXPAINT_SPEAKERS: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "be": ("be", ()),
    "bg": ("bg", ()),
    "ca": ("ca", (b"libVorbis I 20050304", b"Processed by SoX")),
    "da": ("da", ()),
    "el": ("el", ()),
    "es": ("es", ()),
    "fr": ("fr", (b"libVorbis I 20101101",)),
    "fr_2007": ("fr", (b"libVorbis I 20070622",)),
    "ro": ("ro", ()),
    "ru": ("ru", ()),
}
#: Stamp folders whose sounds others recorded (letters, numbers).
TUXPAINT_OTHERS = ("symbols/alphabets/", "symbols/math/")


def _ogg_headers(path: Path) -> bytes:
    """The first bytes of an Ogg Vorbis file: its identification and comment headers."""
    with path.open("rb") as stream:
        return stream.read(8192)


def _tuxpaint(tree: Path) -> Iterator[ClipRef]:
    base = tree / TUXPAINT_ROOT
    for speaker, (language, needles) in TUXPAINT_SPEAKERS.items():
        for path in _files(base, (f"**/*_desc_{language}.ogg",)):
            relative = path.relative_to(base).as_posix()
            if relative.startswith(TUXPAINT_OTHERS):
                continue
            if needles and not all(needle in _ogg_headers(path) for needle in needles):
                continue
            name = relative.removesuffix(f"_desc_{language}.ogg").replace("/", "-")
            yield speaker, name, path


FILLETS_ROOT = "usr/share/games/fillets-ng"
#: Fish Fillets NG: speaker -> (language folder, subtitle font). Every spoken line is a dialog
#: whose id names its sound file and whose font names its character, in the level scripts of
#: fillets-ng-data (``script/<level>/*dialogs_*.lua``: ``dialogId("let-v-oko", "font_big", ...)``);
#: the voices are in fillets-ng-data-cs and fillets-ng-data-nl (``sound/<level>/<language>/``).
#: Only the two fish are kept: the game's credits (``images/menu/credits.png``, "Original Altar
#: credits", "Voices & Animal sounds") put Vít Musil by the big fish and Gabriela Pyšná by the
#: small one for the original Czech voices. The Czech lines of the levels Fillets NG added
#: ("Branch of New Generation" in ``script/worldmap.lua``) are left out: GE2E puts every one of
#: them apart from the fish's other lines (2-means, both fish), and they are near other folders
#: (0.85); the Dutch voices are one recording of all levels. The Dutch voices are uncredited in
#: the packages: each fish is one voice by GE2E (no 2-means split) and near no other folder
#: (centroid cosine at most 0.80). The other characters are left out: the credits name seven
#: more people (Jaroslav Tuček and six first names) with no character each, and several voices
#: are processed (robot dog, statue).
FILLETS_SPEAKERS: dict[str, tuple[str, str]] = {
    "cs-big-fish-vit-musil": ("cs", "font_big"),
    "cs-small-fish-gabriela-pysna": ("cs", "font_small"),
    "nl-big-fish": ("nl", "font_big"),
    "nl-small-fish": ("nl", "font_small"),
}
#: Fillets NG's own levels (``script/worldmap.lua``, "Branch of New Generation"): their Czech
#: lines are other recordings than the credited original voices.
FILLETS_NEW_LEVELS = frozenset(
    ("hanoi", "rush", "fdto", "rotate", "nowall", "hole", "key", "keys", "linux")
)
#: Languages whose lines of :data:`FILLETS_NEW_LEVELS` are left out.
FILLETS_ORIGINAL_ONLY = frozenset(("cs",))
FILLETS_DIALOG = re.compile(r'dialogId\(\s*"([^"]+)"\s*,\s*"([^"]*)"')


def _fillets_fonts(scripts: Path) -> dict[tuple[str, str], str]:
    """(level, dialog id) -> subtitle font, from every level's dialog scripts; a dialog whose
    scripts disagree on its font is left out (mapped to ``""``)."""
    fonts: dict[tuple[str, str], str] = {}
    for path in _files(scripts, ("*/*dialogs*.lua",)):
        level = path.parent.name
        text = path.read_text(encoding="utf-8", errors="replace")
        for dialog, font in FILLETS_DIALOG.findall(text):
            key = (level, dialog)
            fonts[key] = font if fonts.get(key, font) == font else ""
    return fonts


def _fillets(tree: Path) -> Iterator[ClipRef]:
    base = tree / FILLETS_ROOT
    fonts = _fillets_fonts(base / "script")
    if not fonts:
        raise DatasetError("fillets-ng-data: no dialog scripts (script/*/*dialogs*.lua)")
    sounds = base / "sound"
    for speaker, (language, font) in FILLETS_SPEAKERS.items():
        # sound/<level>/<language>/<id>.ogg and sound/share/<jokes>/<language>/<id>.ogg
        for path in _files(sounds, (f"*/{language}/*.ogg", f"*/*/{language}/*.ogg")):
            level = path.relative_to(sounds).parts[0]
            if language in FILLETS_ORIGINAL_ONLY and level in FILLETS_NEW_LEVELS:
                continue
            if fonts.get((level, path.stem)) == font:
                yield speaker, f"{level}-{path.stem}", path


FOTAQ_ARCHIVE = "usr/share/scummvm/flight-of-the-amazon-queen/queen.1c"
#: The speaker folder of each kept character, by the stem of its dialogue file (``.DOG``; the
#: digits after the stem number the files). One character per actor credited in the game's
#: credits (CREDIT2.CRD, inside queen.1c): the actor's character with the most dialogue lines.
FOTAQ_SPEAKERS = {
    "JIM": "tom-hill",  # Jimmy Cook (Sparky, Tom Hill's first by lines, is left out: see notes)
    "BUD": "bill-hootkins",
    "HENRY": "enn-reitel",
    "BOB": "jon-coleman",  # Trader Bob
    "PRIN": "debbie-arnold",  # Princess Azura
    "CHIEF": "barry-james",  # the Pygmy Chief
    "FAYE": "lisa-valdez",
    "WITCH": "regina-reagan",  # the Witch Doctor (Mary-Lou, her first by lines: see notes)
}
#: Joe King's lines (his object descriptions, and his side of every dialogue): Brad Lavelle.
FOTAQ_JOE = "brad-lavelle"
FOTAQ_JOE_DESCRIPTION = re.compile(r"^JOE\d{5}\.SB$")
#: A dialogue line: the dialogue's talk key, the node, J (Joe) or P (the other person), segment.
FOTAQ_LINE = re.compile(r"^(\d\d)([0-9A-F]{4}|SSSS|XXXX)([JP])([0-9A-F])\.SB$")
#: Bytes before a ``.DOG`` file's talk key (ScummVM engines/queen/talk.cpp: 20 header bytes,
#: then the level and unique numbers).
FOTAQ_TALK_KEY_AT = 24
FOTAQ_ENTRY = 21  # name (12 bytes, NUL-padded), bundle (1), offset and size (big-endian 4 each)


def _fotaq_table(archive: bytes) -> dict[str, tuple[int, int]]:
    """The entries of a rebuilt ("QTBL") queen.1c resource file: name -> (offset, size)."""
    if archive[:4] != b"QTBL" or len(archive) < 15:
        raise DatasetError("queen.1c: not a rebuilt (QTBL) resource file")
    count = struct.unpack(">H", archive[13:15])[0]
    table = {}
    for start in range(15, 15 + count * FOTAQ_ENTRY, FOTAQ_ENTRY):
        record = archive[start : start + FOTAQ_ENTRY]
        if len(record) < FOTAQ_ENTRY:
            raise DatasetError("queen.1c: its table runs past the end of the file")
        name = record[:12].split(b"\0")[0].decode("ascii", "replace")
        offset, size = struct.unpack(">II", record[13:21])
        if offset + size > len(archive):
            raise DatasetError(f"queen.1c: entry {name!r} runs past the end of the file")
        table[name] = (offset, size)
    return table


def _fotaq_speakers(archive: bytes, table: dict[str, tuple[int, int]]) -> dict[int, str]:
    """Talk key -> speaker folder, for the dialogue files of the kept characters."""
    speakers = {}
    for name, (offset, size) in table.items():
        stem = re.sub(r"\d+$", "", name.removesuffix(".DOG"))
        if name.endswith(".DOG") and stem in FOTAQ_SPEAKERS:
            if size < FOTAQ_TALK_KEY_AT + 2:
                raise DatasetError(f"queen.1c: dialogue file {name} is too short")
            key = struct.unpack(">h", archive[offset + FOTAQ_TALK_KEY_AT :][:2])[0]
            speakers[key] = FOTAQ_SPEAKERS[stem]
    return speakers


def _fotaq(tree: Path) -> Iterator[ClipRef]:
    """Joe's lines and the kept characters' lines of Flight of the Amazon Queen's talkie, each
    speech entry of queen.1c (MP3) written to a file of its own."""
    archive = (tree / FOTAQ_ARCHIVE).read_bytes()
    table = _fotaq_table(archive)
    speakers = _fotaq_speakers(archive, table)
    audio = tree / "fotaq-speech"
    audio.mkdir(exist_ok=True)
    for name, (offset, size) in sorted(table.items()):
        line = FOTAQ_LINE.match(name)
        if FOTAQ_JOE_DESCRIPTION.match(name) or (line and line.group(3) == "J"):
            speaker = FOTAQ_JOE
        elif line and int(line.group(1)) in speakers:
            speaker = speakers[int(line.group(1))]
        else:
            continue
        path = audio / f"{name.removesuffix('.SB')}.mp3"
        path.write_bytes(archive[offset : offset + size])
        yield speaker, path.stem, path


def _labelled(source: Source) -> Source:
    return dataclasses.replace(source, labels=LABELS.get(source.name, {}))


SOURCES: dict[str, Source] = {
    source.name: _labelled(source)
    for source in (
        Source(
            name="klettres",
            package="klettres-data",
            version="4:22.12.3-1",
            arch="all",
            sha256="1186d257a19e84230856baea0b0b1ded8be9195080fcdb2588970b5cd937f5a8",
            licence="GPL-2+ (KLettres, KDE)",
            description="KDE alphabet tutor: letters and syllables recorded per language",
            evidence=(
                "the KLettres handbook credits one person per language's sounds (Czech, Danish, "
                "Dutch, English, French, German, Hebrew, Italian); uncredited languages are one "
                "voice by GE2E"
            ),
            members=(KLETTRES_ROOT + "/",),
            notes=(
                "es, pt_BR and nds (two people credited each), tn (uncredited; with pt_BR by "
                "GE2E), en_GB (uncredited; with nl by GE2E); id and nn have no sounds"
            ),
            clips=_klettres,
        ),
        Source(
            name="alsa",
            package="alsa-utils",
            version="1.2.8-1",
            arch="amd64",
            sha256="fb24eb1a318228b974efbef726190dd90c6106a208814a3ee8f5d69b91ee0ba4",
            licence="GPL-2 (alsa-utils)",
            description='ALSA speaker-test voice naming the channels ("Front left", "Rear right")',
            evidence="one recorded voice names the channels",
            members=(ALSA_ROOT + "/",),
            notes="Noise.wav (not speech)",
            clips=_alsa,
        ),
        Source(
            name="ktuberling",
            package="ktuberling-data",
            version="4:22.12.3-1",
            arch="all",
            sha256="fba44c875bfa31ea488dadd9263e87a4dcaea0bd47d28817f6c0dc6d2af970ed",
            licence="GPL-2+ (KTuberling, KDE)",
            description="KDE potato-guy game: object and body-part words recorded per language",
            evidence=(
                "each language's sound theme is recorded by its translators (KTuberling "
                "handbook, technical reference); one voice per theme by GE2E"
            ),
            members=(KTUBERLING_ROOT + "/",),
            notes=(
                "the words added later and the later playgrounds' words (often another voice "
                "within a language, by GE2E); the Serbian variants (same files as sr); id"
            ),
            clips=_ktuberling,
            revision=2,
        ),
        Source(
            name="hedgewars",
            package="hedgewars-data",
            version="1.0.2-6",
            arch="all",
            sha256="722225903a72604403e6e0026e40e9a6953f47a74d94efc5f55504bc05bb4761",
            licence="GFDL-1.3 (Hedgewars sounds)",
            description="Hedgewars hedgehog voice packs: short exclamations",
            evidence=(
                'the game\'s credits: "Hedgehogs voice: Stephen Alexander"; "Default_pl, '
                'Russian_pl voices: mtg90pl"'
            ),
            members=(HEDGEWARS_ROOT + "/",),
            notes=(
                "Stephen Alexander's acted character packs and Robot; Russian_pl; the "
                "uncredited Default_es, Default_ru, Default_uk and HillBilly (GE2E cannot tell "
                "them from Stephen Alexander); grunts, jumps, laughs"
            ),
            clips=_hedgewars,
            revision=2,
        ),
        Source(
            name="warzone",
            package="warzone2100-data",
            version="4.3.3-3",
            arch="all",
            sha256="53ad292569e0bf9d16de1642d13629f29ed5dfb68896787e4c65ac60edc07d3d",
            licence="GPL-2+ (Warzone 2100)",
            description="Warzone 2100 voiced messages, tutorial and taunts",
            evidence="role folders; no credits per voice: grouped with GE2E (clip by clip)",
            members=(WARZONE_ARCHIVE,),
            revision=2,
            notes=(
                "taunts and VTOL pilots (numbered variants GE2E cannot keep apart), transport "
                "pilot, NEXUS (processed), extra and proximity messages, effects"
            ),
            clips=_warzone,
        ),
        Source(
            name="tuxpaint",
            package="tuxpaint-stamps-default",
            version="2022.06.04-1",
            arch="all",
            sha256="6db6c1bfc870a47f1499d6203b083522eacb57c5f9c87d468f2e92eb6d9d5f34",
            licence="GPL-2 (Tux Paint stamps, Bill Kendrick and contributors)",
            description='Tux Paint stamps\' spoken descriptions ("a badger", ...) per language',
            evidence=(
                "the stamps' changelog credits one person per language's descriptive sounds "
                "(be, bg, da, el, es, ro, ru; Catalan's spoken translations); French's two "
                "credited recorders are its two encoder batches, two voices by GE2E"
            ),
            members=(TUXPAINT_ROOT + "/",),
            clips=_tuxpaint,
            revision=2,
            notes=(
                "letters and numbers (recorded by others); Catalan's other batches and its "
                "animals (another voice); the uncredited nl, lt, ml and English sounds"
            ),
        ),
        Source(
            name="fillets",
            package="fillets-ng-data",
            version="1.0.1-1.1",
            arch="all",
            sha256="25de89afd8b1adf7bcace8290248a6a22c89cd42300317e69000e162c032cf84",
            licence="GPL-2 (Fish Fillets NG, ALTAR interactive and the Fillets NG team)",
            description=(
                "Fish Fillets NG: the two fish's spoken dialogue lines, sentences, in Czech "
                "(the original voices) and Dutch"
            ),
            evidence=(
                "each line's speaker is its dialog's subtitle font in the level scripts "
                "(font_big, font_small); the game's credits name Vít Musil (big fish) and "
                "Gabriela Pyšná (small fish) for the original Czech voices; the uncredited Dutch "
                "fish are one voice each by GE2E and near no other folder"
            ),
            members=(FILLETS_ROOT + "/script/",),
            extra=(
                Package(
                    "fillets-ng-data-cs",
                    "1.0.1-1.1",
                    "all",
                    "3ecef99b9456f1c80c9625c6f2418642b52d58e7167a46bad7a412db17991b14",
                    (FILLETS_ROOT + "/sound/",),
                ),
                Package(
                    "fillets-ng-data-nl",
                    "1.0.1-1.1",
                    "all",
                    "afb4443fda9ab507dee578b75be857d121718a1cd6017a474f30e0eb13dc9d10",
                    (FILLETS_ROOT + "/sound/",),
                ),
            ),
            min_seconds=2.0,
            notes=(
                "the Czech lines of the levels Fillets NG added (other recordings: apart from "
                "the credited voices by GE2E); the other characters (seven more voice actors "
                "credited with no character each; processed voices: robot dog, statue); lines "
                "spoken by both fish, sound files no dialog script names, lines under 2 s, the "
                "language-free effects and music of fillets-ng-data"
            ),
            clips=_fillets,
            revision=2,
        ),
        Source(
            name="fotaq",
            package="flight-of-the-amazon-queen",
            version="1.0.0-9",
            arch="all",
            sha256="40c08fd258d6fe95c46c1eaf5e9137f84ba330657995a281bd887c94a560a0f1",
            licence=(
                "Flight of the Amazon Queen licence (John Passfield and Steven Stamatiadis): "
                "free to redistribute with its notices; the game may not be sold"
            ),
            description=(
                "Flight of the Amazon Queen (the CD talkie, English): spoken dialogue, "
                "sentences, 11 kHz MP3"
            ),
            evidence=(
                "the game's credits (CREDIT2.CRD) name the actor of each character; a line's "
                "character is its dialogue file's (the talk key in the .DOG header, as ScummVM's "
                "talk.cpp reads it); one character per actor"
            ),
            members=(FOTAQ_ARCHIVE,),
            min_seconds=2.0,
            notes=(
                "each actor's other characters; Klunk, Lola and Rico (credited to two actors "
                "each); Sparky and Mary-Lou (credited to Tom Hill and Regina Reagan, one voice "
                "by GE2E: EER 0.47, centroid cosine 0.98); Jessica Martin's characters (GE2E "
                "puts them with three other actresses', EER 0.44-0.47); the uncredited dialogue "
                "files (Death, Oracle, Laris, Tam, the prisoner, the tall pygmy); cutaway lines "
                "(their speaker is in the game's object tables); lines under 2 s"
            ),
            clips=_fotaq,
        ),
        Source(
            name="bass",
            package="beneath-a-steel-sky",
            version="0.0372-8",
            arch="all",
            sha256="e2a25c880220c26a4dfd42904b878cc655afa1c72895f9c932befbd078622934",
            licence=(
                "Beneath a Steel Sky licence (Revolution Software): free to redistribute with its "
                "notices, and to modify if marked; the game may not be sold"
            ),
            description=(
                "Beneath a Steel Sky (the CD talkie, English): spoken dialogue, sentences, "
                "8-bit 11 kHz"
            ),
            evidence=(
                "a line's character is its talk animation in the game scripts (the fnSpeak* "
                "calls' animation, named in sky.cpt); the credits name four actors and no "
                "character each, so one character per voice is kept by measurement: seven that "
                "CAM++ and GE2E both keep apart (pairwise EER at most 0.18 and 0.23, as far apart "
                "as Flight of the Amazon Queen's credited actors)"
            ),
            members=bass.MEMBERS,
            min_seconds=2.0,
            notes=(
                "the other characters (each within the measured reach of a kept one, or of "
                "another kept before it: most likely the same few actors); Joey and the medical "
                "robot, the monitor, the jukebox and other processed voices; lines spoken with "
                "no talk animation (mostly Foster's remarks: their speaker is not in the call); "
                "lines two characters' animations claim; lines under 2 s"
            ),
            clips=bass.clips,
        ),
    )
}
