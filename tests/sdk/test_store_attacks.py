"""Issue 33, the store side: each test performs one attack on the template store.

Parallel processes (Python and Node alike) must not score more attempts than the back-off
allows; a store, freshness folder or template another user can write is refused with the
``chmod`` to run; a FIFO in a template's place never blocks; the lock a crashed process left
behind does not block the user forever.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from uvsdk import Verifier
from uvsdk.backoff import BackoffPolicy
from uvsdk.errors import StorePermissionError, TemplateError, UvsdkError
from uvsdk.files import user_lock
from uvsdk.template import TemplateStore

from ..conftest import PASSPHRASE
from ..processes import finish, start

REPOSITORY = Path(__file__).resolve().parents[2]
CONFORMANCE = REPOSITORY / "conformance"
JS = REPOSITORY / "js"
#: a lock-out far longer than any test, so the count never depends on how long processes take
LONG_LOCKOUT = BackoffPolicy(attempts=5, base_seconds=86400.0, max_seconds=86400.0)
IMPOSTOR = CONFORMANCE / "audio" / "speaker1-6.wav"
#: one impostor attempt by the TypeScript port: exit 1 rejected, 2 refused (one line on stderr)
NODE_VERIFY = """
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";
const [dist, bundlePath, store, user, clip] = process.argv.slice(1);
const uvsdk = await import(pathToFileURL(dist + "/src/node.js").href);
const ort = await import("onnxruntime-node");
try {
  const bundle = await uvsdk.loadBundle(new Uint8Array(await readFile(bundlePath)), { name: "b.uvb" });
  const verifier = await uvsdk.Verifier.create({
    ort, bundle, store: new uvsdk.FileStore(store), passphrase: process.env.UVSDK_PASSPHRASE });
  const { samples } = await uvsdk.decodeWavFile(clip);
  const decision = await verifier.verify(samples, { user });
  console.log(decision.accepted ? "ACCEPT" : "REJECT");
  process.exitCode = decision.accepted ? 0 : 1;
} catch (error) {
  if (!(error instanceof uvsdk.UvsdkError)) throw error;
  console.error(`uvsdk: error: ${error.message}`);
  process.exitCode = 2;
}
"""


def _enroll_conformance_speaker(store: Path) -> Verifier:
    """Speaker 0 of the conformance audio enrolled as 'alice' (fast scrypt, a long lock-out)."""
    bundle = CONFORMANCE / "bundles" / "voice-embedding.uvb"
    templates = TemplateStore(store, passphrase=PASSPHRASE, scrypt_log2_n=10)
    verifier = Verifier(bundle, store=templates, backoff=LONG_LOCKOUT)
    verifier.enroll([CONFORMANCE / "audio" / f"speaker0-{j}.wav" for j in range(5)], user="alice")
    return verifier


def _python_verify(verifier: Verifier, store: Path) -> list[str]:
    return [sys.executable, "-m", "uvsdk.cli", "verify", str(IMPOSTOR), "--user", "alice",
            "--bundle", str(verifier.bundle.path), "--store", str(store)]  # fmt: skip


def _node_verify(verifier: Verifier, store: Path) -> list[str]:
    node = shutil.which("node")
    if node is None or not (JS / "dist" / "src" / "node.js").is_file():
        pytest.skip("needs node and the built TypeScript port (cd js && npm run build)")
    return [node, "--input-type=module", "-e", NODE_VERIFY, "--", str(JS / "dist"),
            str(verifier.bundle.path), str(store), "alice", str(IMPOSTOR)]  # fmt: skip


def _attack(commands: list[list[str]]) -> tuple[int, list[subprocess.CompletedProcess[str]]]:
    """Start every command at once, wait for all of them; how many attempts were scored."""
    environment = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    processes = [start(command, env=environment, cwd=JS) for command in commands]
    results = [finish(process, stall_seconds=300) for process in processes]
    scored = [r for r in results if r.returncode == 1 and "REJECT" in r.stdout]
    refused = [r for r in results if r.returncode == 2 and "locked out" in r.stderr]
    assert len(scored) + len(refused) == len(results), [(r.returncode, r.stderr) for r in results]
    return len(scored), results


# -- 1. parallel processes scored more attempts than the back-off allows ---------------------------


def test_parallel_python_processes_score_at_most_the_limit(tmp_path: Path) -> None:
    verifier = _enroll_conformance_speaker(tmp_path / "store")
    scored, _ = _attack([_python_verify(verifier, tmp_path / "store")] * 8)
    assert scored == LONG_LOCKOUT.attempts
    assert verifier.store.load("alice").backoff.failures == scored


def test_parallel_python_and_node_processes_exclude_each_other(tmp_path: Path) -> None:
    verifier = _enroll_conformance_speaker(tmp_path / "store")
    python = _python_verify(verifier, tmp_path / "store")
    node = _node_verify(verifier, tmp_path / "store")
    scored, _ = _attack([python, node] * 5)
    assert scored == LONG_LOCKOUT.attempts
    assert verifier.store.load("alice").backoff.failures == scored
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["alice.uvt"]


def test_the_lock_is_one_file_per_user_and_waits(tmp_path: Path) -> None:
    """A second holder waits until the first releases (a thread here; processes above)."""
    tmp_path.chmod(0o700)
    order: list[str] = []
    with user_lock(tmp_path, "alice"):
        assert (tmp_path / ".alice.lock").is_file()
        waiter = threading.Thread(target=_take_and_note, args=(tmp_path, order))
        waiter.start()
        with user_lock(tmp_path, "bob"):  # another user's lock is free
            order.append("bob")
        order.append("alice released")
    waiter.join()
    assert order == ["bob", "alice released", "second alice"]
    assert list(tmp_path.iterdir()) == []


def _take_and_note(folder: Path, order: list[str]) -> None:
    with user_lock(folder, "alice"):
        order.append("second alice")


def test_a_lock_left_by_a_crashed_process_is_recovered(tmp_path: Path) -> None:
    crashed = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    lock = tmp_path / ".alice.lock"
    lock.write_text(f"{crashed.stdout.strip()} 0123456789abcdef {os.uname().nodename}\n")
    with user_lock(tmp_path, "alice"):
        assert str(os.getpid()) == lock.read_text().split()[0]
    assert list(tmp_path.iterdir()) == []


def test_a_template_write_keeps_other_users_lock_files(tmp_path: Path) -> None:
    """``.alice.uvt.lock`` is user 'alice.uvt''s lock, not a leftover of user 'alice'."""
    store = TemplateStore(tmp_path / "store", passphrase=PASSPHRASE)
    with store.locked("alice.uvt", create=True), store.locked("alice"):
        assert (tmp_path / "store" / ".alice.uvt.lock").exists()


# -- 3. a freshness folder other users can write -----------------------------------------------


def test_a_freshness_folder_others_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("UVSDK_STATE_DIR", str(state))
    store = TemplateStore(tmp_path / "store", passphrase=PASSPHRASE)
    from uvsdk.template import Template

    store.save(Template(user="alice", created=1.0))
    for folder in (state, state / "freshness"):
        folder.chmod(0o777)
        with pytest.raises(StorePermissionError, match=re.escape(f"chmod go-w {folder}")):
            TemplateStore(tmp_path / "store", passphrase=PASSPHRASE).load("alice")
        with pytest.raises(StorePermissionError, match=re.escape(f"chmod go-w {folder}")):
            store.save(Template(user="alice", created=1.0))
        folder.chmod(0o700)
    record = next((state / "freshness").iterdir())
    record.chmod(0o666)
    with pytest.raises(StorePermissionError, match="chmod 600"):
        TemplateStore(tmp_path / "store", passphrase=PASSPHRASE).load("alice")
    record.chmod(0o600)
    assert TemplateStore(tmp_path / "store", passphrase=PASSPHRASE).load("alice").user == "alice"


# -- 4. a FIFO in a template's place hung verify while holding the lock -------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_a_templates_place_is_refused_at_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    os.mkfifo(store / "alice.uvt", 0o600)
    command = [sys.executable, "-c", "from uvsdk.template import TemplateStore; "
               f"TemplateStore({str(store)!r}, passphrase='x').load('alice')"]  # fmt: skip
    result = finish(start(command), stall_seconds=60, cpu_is_progress=False)
    assert result.returncode == 1 and "alice.uvt is not a regular file" in result.stderr
    with pytest.raises(TemplateError, match="not a regular file"):
        TemplateStore(store, passphrase="x").load("alice")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_a_freshness_records_place_is_refused_at_once(tmp_path: Path) -> None:
    record = tmp_path / "state" / "freshness" / f"{(b'k' * 16).hex()}.gen"
    record.parent.mkdir(parents=True, mode=0o700)
    os.mkfifo(record, 0o600)
    command = [sys.executable, "-c", "from uvsdk.freshness import FileFreshness; "
               f"FileFreshness({str(tmp_path / 'state')!r}).get(b'k' * 16)"]  # fmt: skip
    result = finish(start(command), stall_seconds=60, cpu_is_progress=False)
    assert result.returncode == 1 and ".gen is not a regular file" in result.stderr


# == issue 46: stale locks hung every operation forever; a full disk left lock files behind ======

#: a process that takes alice's lock in ``STORE`` with the lock settings patched as given, then
#: runs the command line given after it (``verify ...``): the waits of the test are bounded by
#: the lock's own settings, never by how long the machine takes
PATCHED_UVSDK = """
import sys
import uvsdk.files as files
files.LOCK_TIMEOUT_SECONDS = float(sys.argv[1])
files.LOCK_NOTICE_SECONDS = float(sys.argv[2])
from uvsdk.cli import main
sys.argv = ["uvsdk", *sys.argv[3:]]
main()
"""


def _patched_verify(verifier: Verifier, store: Path, timeout: float, notice: float) -> list[str]:
    return [sys.executable, "-c", PATCHED_UVSDK, str(timeout), str(notice), "verify", str(IMPOSTOR),
            "--user", "alice", "--bundle", str(verifier.bundle.path), "--store", str(store)]  # fmt: skip


def test_46_a_lock_of_another_host_is_waited_on_with_progress_then_named(tmp_path: Path) -> None:
    store = tmp_path / "store"
    verifier = _enroll_conformance_speaker(store)
    lock = store / ".alice.lock"
    lock.write_text("999999 0123456789abcdef oldhost\n")
    environment = {**os.environ, "UVSDK_PASSPHRASE": PASSPHRASE}
    command = _patched_verify(verifier, store, timeout=0, notice=0)
    result = finish(start(command, env=environment), stall_seconds=60, cpu_is_progress=False)
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    notice, error = result.stderr.strip().splitlines()
    assert notice == f"uvsdk: waiting for the lock {lock}, held by process 999999 on oldhost " \
        "(giving up if one holder keeps it 0 s)"  # fmt: skip
    assert error.startswith(f"uvsdk: error: the lock {lock} has been held by process 999999 on ")
    assert error.endswith(f"remove {lock}")
    assert lock.read_text() == "999999 0123456789abcdef oldhost\n"  # never broken
    assert sorted(p.name for p in store.iterdir()) == [".alice.lock", "alice.uvt"]
    assert verifier.store.load("alice").backoff.failures == 0  # no attempt counted
    templates = TemplateStore(store, passphrase=PASSPHRASE, lock_timeout=0)
    with pytest.raises(UvsdkError, match="has been held by") as caught, templates.locked("alice"):
        pass
    assert caught.value.code == "store.locked"


def test_46_a_lock_naming_this_process_with_another_token_is_stale(tmp_path: Path) -> None:
    """A crashed app restarted under the same process id (PID 1 in a container): the token tells
    its old lock from one it holds."""
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    take = ("import os, socket, sys\nfrom pathlib import Path\nfrom uvsdk.files import user_lock\n"
            "folder = Path(sys.argv[1])\n"
            "(folder / '.alice.lock').write_text(f'{os.getpid()} 0123456789abcdef "
            "{socket.gethostname()}\\n')\n"
            "with user_lock(folder, 'alice'):\n    print((folder / '.alice.lock').read_text())\n")  # fmt: skip
    result = finish(start([sys.executable, "-c", take, str(store)]), stall_seconds=60,
                    cpu_is_progress=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[1] != "0123456789abcdef"
    assert list(store.iterdir()) == []
    # this process's own lock, taken twice (two threads), is not stale: the second waits
    with (
        user_lock(store, "alice"),
        pytest.raises(UvsdkError, match="has been held by"),
        user_lock(store, "alice", timeout=0),
    ):
        pass


def test_46_a_full_disk_leaves_no_lock_file_behind(tmp_path: Path, monkeypatch) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    write = os.write

    def full(descriptor: int, data: bytes) -> int:
        if data.startswith(f"{os.getpid()} ".encode()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(descriptor, data)

    monkeypatch.setattr(os, "write", full)
    for _ in range(3):
        with pytest.raises(UvsdkError, match="No space left") as caught, user_lock(store, "alice"):
            pass
        assert caught.value.code == "store.io"
    assert list(store.iterdir()) == []
