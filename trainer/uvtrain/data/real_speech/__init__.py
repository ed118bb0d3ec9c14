"""Real recorded speakers from Debian packages, to calibrate and evaluate a verification threshold.

Speaker-verification corpora cannot be fetched here (hubs are out of reach), but a few Debian
packages ship people's recorded voices: the localised sounds of the KDE educational games
(KLettres' letters and syllables, KTuberling's spoken words), the spoken descriptions of Tux
Paint's stamps, the ALSA speaker-test voice, the voice packs of Hedgewars, the voiced
messages of Warzone 2100 and, sentence-length (2 s and more), the two fish's dialogue of Fish
Fillets NG in Czech and Dutch and the credited actors' dialogue of Flight of the Amazon Queen. :func:`fetch_real_speech` downloads each source's pinned ``.deb``
files with ``apt-get download`` (or reads local copies), checks their SHA-256, takes the voice
files (and, for Fish Fillets, the level scripts that say who speaks each line) out of them (pure
Python: ``ar`` + ``tar``, no dpkg) and writes one folder per speaker::

    root/downloads/<package>_<version>_<arch>.deb     the cache (kept)
    root/speakers/<source>-<speaker>/<clip>.wav       16-bit PCM, mono, at the file's own rate
    root/speakers/SOURCES.md, sources.json            sources, licences, speakers, clips, minutes,
                                                      each speaker's gender and language labels
    root/manifests/<source>.json                      what was written (the cache's record)

**Who is a speaker.** A folder is one person only where there is a reason to believe it: the
package's credits name who recorded that language or voice pack, or the game credits one actor
for a set of voices. Each source's ``evidence`` says which. Folders whose credits name two people
(KLettres' Spanish, Brazilian Portuguese, Low Saxon) and sets whose recordings a pretrained GE2E
encoder put with another folder's are left out or merged, as each source's notes say
(docs/trainer.md, "Real speech"). Where a credit is missing, a folder is kept only when GE2E finds
one voice in it and no other folder near it; that check was made once, when the tables below were
chosen (nothing is embedded at run time). Clips are the files of at least :data:`MIN_SECONDS`
seconds (a source's ``min_seconds``: 2 s for Fish Fillets); effects, grunts, laughs, music and
processed (robot, radio) voices are left out.

**Gender and language.** Every speaker has a ``gender`` (female, male, child, unknown) and a
``language`` label with how each was determined (``labels.json``, :data:`LABELS`; written into
``sources.json`` and ``SOURCES.md``): a credit that names the person decides the gender unless the
voice's measured median F0 (:mod:`.pitch`, autocorrelation) is in the other gender's range or
splits in two; with no credit, the measured F0 does by its thresholds; ``unknown`` where neither
tells. The language is the package's locale folder or file suffix. They let a benchmark count
impostor pairs of the same gender (``benchmarks/far_generalisation.py``).

**Caching.** A source whose folders were written (``root/manifests/<source>.json`` lists
the package hash and every file with its size) is skipped without download or rewrite, so a
second run does nothing. The mirror may move on to a newer version of a package: the pinned
version is then no longer downloadable and the run stops with one line naming the package and
the ``debs`` option (``--deb PACKAGE=PATH``) that takes a local copy of the pinned ``.deb``.

    uvtrain data real-speech --out DIR [--source NAME ...] [--deb PACKAGE=PATH ...]
"""

from .fetch import (
    SourceSummary,
    describe_sources,
    extract_deb,
    fetch_real_speech,
    folder_labels,
    summary_text,
    written_summary,
)
from .sources import GENDERS, LABELS, MIN_SECONDS, Package, Source

__all__ = [
    "GENDERS",
    "LABELS",
    "MIN_SECONDS",
    "Package",
    "Source",
    "SourceSummary",
    "describe_sources",
    "extract_deb",
    "fetch_real_speech",
    "folder_labels",
    "summary_text",
    "written_summary",
]
