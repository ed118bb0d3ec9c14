"""The documentation's shell blocks are executable: every ```bash block of README.md (and of
docs/sdk.md) runs verbatim, in order, in one fresh temporary folder per document, as a new user
following the page would run them — so a README that drifts from the code fails CI.

How a block runs
----------------
Each block is a ``bash`` script with ``set -eo pipefail``: any failing command fails the block
(and the test, which prints the block's line, the script as run and its output). The working
folder holds only links to ``examples/``, ``benchmarks/`` and ``constraints.txt`` of this checkout,
plus what earlier blocks wrote. ``uvsdk``, ``uvtrain``, ``uvexport`` and ``python`` are this
interpreter's (its ``bin`` folder first on ``PATH``). No ``UVSDK_*``/``UVTRAIN_*`` setting comes
from the developer's shell, and ``HOME``/``XDG_*`` point into the temporary folder, so default
stores and dataset caches are fresh and nothing outside is touched. What a block exports (e.g.
``UVSDK_PASSPHRASE``) is seen by the blocks after it, as in one terminal.

Annotations
-----------
An HTML comment right before the block's opening fence (invisible on the rendered page) tells
the test what to change; a block without one runs exactly as written::

    <!-- readme-test: skip REASON... -->          not run; the reason (the rest of the comment,
                                                   as written) is required
    <!-- readme-test: replace "OLD" "NEW" -->      every OLD in the block becomes NEW (small
                                                   settings); OLD must occur, so it cannot drift
    <!-- readme-test: before "COMMANDS" -->        run first, in the same script (stands in for
                                                   what the reader brings, e.g. their recordings)
    <!-- readme-test: exit N -->                   the block's expected exit status (default 0)

Several directives other than ``skip`` may share one comment (one after another, on one line or
several), quoted by shell rules (``shlex``); ``#`` starts a comment to the end of its line — say
there why a substitution keeps the block's meaning.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.processes import run_until_stalled

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/sdk.md")
#: what a block may refer to by a relative path, linked into its working folder
LINKED = ("examples", "benchmarks", "constraints.txt")
#: seconds a block may go without progress (output or CPU time) before the test fails; a slow
#: machine only makes it slower
BLOCK_STALL_SECONDS = 300

FENCE = re.compile(r"^```(\S*)\s*$")
ANNOTATION = re.compile(r"<!--\s*readme-test:(.*?)-->", re.DOTALL)


class AnnotationError(ValueError):
    """An annotation the test does not understand."""


@dataclass
class Block:
    """One ```bash block of a document, with what its annotation asks."""

    document: str
    line: int  # 1-based line of the opening fence
    text: str
    skip: str | None = None
    replacements: list[tuple[str, str]] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    exit_status: int = 0
    annotated: bool = False

    def script(self) -> str:
        """The block as it runs: the replacements made, every one of which must apply."""
        text = self.text
        for old, new in self.replacements:
            if old not in text:
                raise AnnotationError(
                    f"{self.document}:{self.line}: replace {old!r}: not in the block"
                )
            text = text.replace(old, new)
        return "\n".join([*self.before, text])


def parse_annotation(body: str, block: Block) -> None:
    """Apply the directives of one ``readme-test:`` comment to ``block``."""
    if body.split(maxsplit=1)[:1] == ["skip"]:
        reason = " ".join(body.split()[1:])
        if not reason:
            raise AnnotationError(f"{block.document}:{block.line}: skip needs a reason")
        block.skip = reason
        return
    words = shlex.split(body, comments=True)
    while words:
        directive = words.pop(0)
        if directive == "replace" and len(words) >= 2:
            block.replacements.append((words.pop(0), words.pop(0)))
        elif directive == "before" and words:
            block.before.append(words.pop(0))
        elif directive == "exit" and words and words[0].isdigit():
            block.exit_status = int(words.pop(0))
        else:
            raise AnnotationError(
                f"{block.document}:{block.line}: cannot read the annotation at {directive!r}"
            )


def shell_blocks(document: str, text: str) -> list[Block]:
    """The ```bash blocks of a Markdown text, each with the annotation just before its fence."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(
            (j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), len(lines)
        )
        if opening[1] in ("bash", "sh", "shell", "console"):
            block = Block(document, index + 1, "\n".join(lines[index + 1 : end]) + "\n")
            before = "\n".join(lines[:index]).rstrip()
            annotation = ANNOTATION.search(before[before.rfind("\n<!--") + 1 :])
            if annotation and before.endswith("-->"):
                parse_annotation(annotation[1], block)
                block.annotated = True
            blocks.append(block)
        index = end + 1
    return blocks


def document_blocks(document: str) -> list[Block]:
    return shell_blocks(document, (ROOT / document).read_text(encoding="utf-8"))


def clean_environment(home: Path) -> dict[str, str]:
    """The reader's fresh terminal: this interpreter's tools first, no uvsdk/uvtrain settings,
    home, data, config and cache folders inside the temporary folder."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("UVSDK_", "UVTRAIN_", "XDG_", "PYTEST_", "VIRTUAL_ENV"))
    }
    environment["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), environment.get("PATH", os.defpath)]
    )
    environment["HOME"] = str(home)
    for name, folder in (
        ("XDG_DATA_HOME", ".local/share"),
        ("XDG_CONFIG_HOME", ".config"),
        ("XDG_CACHE_HOME", ".cache"),
    ):
        environment[name] = str(home / folder)
    return environment


def run_block(block: Block, cwd: Path, environment: dict[str, str]) -> dict[str, str]:
    """Run one block; fail the test unless it exits as annotated. Returns the environment it
    leaves behind (its exports), for the next block."""
    saved = cwd.parent / "environment"
    script = f"trap 'env -0 > {shlex.quote(str(saved))}' EXIT\nset -eo pipefail\n" + block.script()
    result = run_until_stalled(
        ["bash", "-c", script], stall_seconds=BLOCK_STALL_SECONDS, cwd=cwd, env=environment
    )
    if result.returncode != block.exit_status:
        output = (result.stdout + result.stderr)[-4000:]
        pytest.fail(
            f"{block.document}:{block.line}: the block exited with {result.returncode}, "
            f"expected {block.exit_status}.\n--- as run:\n{block.script()}--- output (end):\n"
            f"{output}",
            pytrace=False,
        )
    entries = saved.read_bytes().decode("utf-8", "replace").split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


# -- the parser -------------------------------------------------------------------------------------


def test_blocks_and_annotations_are_read_as_documented() -> None:
    text = "\n".join(
        [
            "```bash",
            "echo as written",
            "```",
            "<!-- readme-test: replace '--rounds 800' '--rounds 2'",
            '  before "mkdir -p my-clips" exit 1 -->',
            "```bash",
            "uvtrain run --rounds 800  # a comment",
            "```",
            "```",
            "uvsdk verify FILE...   (a synopsis: not run)",
            "```",
            "<!-- readme-test: skip installs: CI's own step runs it -->",
            "```bash",
            "pip install .",
            "```",
        ]
    )
    plain, changed, skipped = shell_blocks("doc.md", text)
    assert (plain.line, plain.script(), plain.skip, plain.exit_status) == (
        1,
        "echo as written\n",
        None,
        0,
    )
    assert changed.script() == "mkdir -p my-clips\nuvtrain run --rounds 2  # a comment\n"
    assert changed.exit_status == 1 and changed.skip is None
    assert skipped.skip == "installs: CI's own step runs it"
    with pytest.raises(AnnotationError, match="not in the block"):
        Block("doc.md", 1, "echo\n", replacements=[("--gone", "x")]).script()
    for bad in ("skip", "skip  ", "exit soon", "replace one", "reboot"):
        with pytest.raises(AnnotationError):
            parse_annotation(bad, Block("doc.md", 1, ""))


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_annotation_is_understood(document: str) -> None:
    """Every block parses, every ``replace`` applies, and every ``readme-test`` comment belongs to
    a block (one that drifted away from its fence would silently stop applying)."""
    text = (ROOT / document).read_text(encoding="utf-8")
    blocks = shell_blocks(document, text)
    for block in blocks:
        block.script()
    annotated = sum(block.annotated for block in blocks)
    comments = re.findall(r"^<!--\s*readme-test:", text, re.MULTILINE)
    assert annotated == len(comments), "a readme-test comment is not on a block"


# -- the documents, run ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "document", [document for document in DOCUMENTS if document_blocks(document)]
)
def test_the_documents_shell_blocks_run_as_written(document: str, tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    environment = clean_environment(home)
    ran = 0
    for block in document_blocks(document):
        if block.skip is None:
            started = time.perf_counter()
            environment = run_block(block, work, environment)
            print(f"{document}:{block.line}: {time.perf_counter() - started:.1f} s")
            ran += 1
    assert ran, f"{document}: no block ran"
