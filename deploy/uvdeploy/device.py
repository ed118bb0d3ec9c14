"""A device of a Flower run: its folder of samples, its SDK template store, its enrollment.

The ClientApp (:mod:`.client`) hands each request here. Registration and enrollment are the
SDK's work (decoding, codewords, the encrypted store) and load no torch: a SuperNode starts a
process per message, and these need only the input keys (:class:`~uvdeploy.inputs.InputSettings`).
A round's local update is :class:`uvdeploy.training.TrainingDevice`'s, with the simulator's own
code."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from uvsdk.bundle import Code
from uvsdk.codeword import unpack_generator
from uvsdk.inputs import ModelInput
from uvtrain.errors import TrainingError
from uvtrain.io import atomic_write, read_json, write_json

from .errors import DeviceError

#: The device's record of the last round it sent an update in (the participation rule's half
#: that the device keeps, :meth:`Device.take_part`), in its store folder.
PARTICIPATION = "participation.json"
#: The most files of a device's folder its chain vector is the mean of (as the exporter's
#: :data:`uvexport.calibrate.MAX_SAMPLES_PER_PERSON` bounds a person's clips).
CHAIN_FILES = 60


class Device:
    """One device's view of a run: its folder, its template store, and the input its files are
    decoded to (``source``)."""

    def __init__(self, node_config: dict[str, Any], source: ModelInput) -> None:
        self.source = source
        if "data" not in node_config or "store" not in node_config:
            raise DeviceError("the node config needs data='FOLDER' and store='FOLDER'")
        self.data = Path(str(node_config["data"])).expanduser()
        self.store_dir = Path(str(node_config["store"])).expanduser()
        self.user = str(node_config.get("user", "default"))
        self.bundle_path = Path(str(node_config.get("bundle", self.store_dir / "model.uvb")))
        self.allow_plain = str(node_config.get("allow_plain_feduv", "false")).lower() == "true"
        self._store: Any = None
        self._samples: np.ndarray | None = None

    # -- the SDK's store ---------------------------------------------------------------------

    @property
    def store(self) -> Any:
        from uvsdk.template import TemplateStore

        if self._store is None:
            self._store = TemplateStore(self.store_dir)
        return self._store

    def template(self) -> Any:
        """The user's template, or ``None``."""
        return self.store.load(self.user) if self.store.exists(self.user) else None

    def status(self, code_sha256: str | None) -> dict[str, Any]:
        """What the server may know at registration: the user id it assigned before (if any),
        whether a codeword of this run's code is held (not the codeword), the sample count."""
        template = self.template()
        user_id = -1 if template is None or template.user_id is None else int(template.user_id)
        has_codeword = bool(
            template is not None
            and template.codeword is not None
            and template.code_sha256 == code_sha256
        )
        return {"user_id": user_id, "codeword": has_codeword, "samples": len(self.samples())}

    def assign(self, user_id: int, code: Any | None) -> None:
        """Take the server's user id; with the run's ``code`` (sent when the method's devices hold a
        codeword), make the codeword with the SDK (kept encrypted)."""
        from uvsdk import Verifier
        from uvsdk.template import Template

        template = self.template()
        if code is not None:
            if template is not None and template.codeword is not None:
                if template.code_sha256 == code.fingerprint and template.user_id == user_id:
                    return
                raise DeviceError(
                    f"user {self.user!r} already holds a codeword of another code or id: "
                    "delete the template (uvsdk delete) to join this federation"
                )
            Verifier(store=self.store).new_codeword(self.user, user_id, code=code)
            return
        if template is None:
            self.store.save(Template(user=self.user, created=time.time(), user_id=user_id))
        elif template.user_id != user_id:
            self.store.save(template.replace(user_id=user_id))

    # -- data ----------------------------------------------------------------------------------

    def samples(self) -> np.ndarray:
        """The training samples: every usable file of ``data``, decoded as the SDK decodes it
        (audio cut into the model's windows, images resized), stacked."""
        if self._samples is not None:
            return self._samples
        from uvsdk.errors import MediaError

        if not self.data.is_dir():
            raise DeviceError(f"the data folder {self.data} does not exist")
        source, pieces, skipped = self.source, [], 0
        for path in self.files():
            try:
                sample = source.load(path)
                source.check(sample, name=path.name)
                pieces.extend(source.windows(sample))
            except MediaError:
                skipped += 1
        if not pieces:
            raise DeviceError(f"no usable samples in {self.data} ({skipped} file(s) skipped)")
        self._samples = np.concatenate(pieces)
        return self._samples

    def files(self) -> list[Path]:
        """The files of ``data`` in name order, hidden ones (``.name``) left out: what the
        device's samples and its chain vector are read from."""
        return sorted(p for p in self.data.iterdir() if p.is_file() and not p.name.startswith("."))

    def take_part(self, round_number: int, period: int) -> None:
        """The device's half of the participation rule (``dp_period``, :mod:`uvtrain.privacy`):
        refuse a second round in one period of ``period`` rounds, whatever the server's
        selection did, and record this one before the update leaves. The record is the last
        round taken part in: a round numbered lower starts a new run. It holds the server to
        its own numbering of rounds; a server that renumbers them is not bounded by it
        (docs/privacy.md)."""
        if period <= 0:
            return
        path = self.store_dir / PARTICIPATION
        if path.exists():
            try:
                last = read_json(path)
                before, window = int(last["round"]), int(last["period"])
            except (TrainingError, KeyError, TypeError, ValueError):
                raise DeviceError(f"{path}: not a participation record; remove it") from None
            same = window == period and (before - 1) // period == (round_number - 1) // period
            if same and round_number >= before:
                first = (round_number - 1) // period * period + 1
                raise DeviceError(
                    f"refusing round {round_number}: this device took part in round {before}, "
                    f"and the run allows one round in each period of {period} (rounds {first}-"
                    f"{first + period - 1})"
                )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        write_json(path, {"round": round_number, "period": period})

    def chain_vector(self, bundle: bytes, sha256: str) -> np.ndarray:
        """What this device adds to its recording chain's mean (:mod:`uvdeploy.centre`): the
        mean of the unit vectors ``bundle`` gives its usable files (at most
        :data:`CHAIN_FILES`, in name order; each embedded as enrollment embeds it, raw, before
        any centring), so its norm is at most 1 whatever the files hold. Every device weighs
        the same in the chain's mean, however many files it has: one person's bound."""
        import tempfile

        from uvsdk import Verifier
        from uvsdk.errors import MediaError, UvsdkError

        if hashlib.sha256(bundle).hexdigest() != sha256:
            raise DeviceError("the bundle sent for the chain's mean is not the one named")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "centre.uvb"
            path.write_bytes(bundle)
            try:
                verifier = Verifier(path, store=self.store)
            except UvsdkError as error:
                raise DeviceError(f"the bundle sent for the chain's mean: {error}") from None
            units = []
            for file in self.files():
                if len(units) == CHAIN_FILES:
                    break
                try:
                    vector = verifier.embed(file).astype(np.float64)
                except MediaError:
                    continue
                units.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
        if not units:
            raise DeviceError(f"no usable file in {self.data} for the chain's mean")
        return np.mean(units, axis=0).astype(np.float32)

    # -- the end of the run ---------------------------------------------------------------------

    def enroll(self, bundle: bytes, target_tpr: float) -> dict[str, Any]:
        """Write the final bundle and enroll with it (the warm-up threshold at ``target_tpr``)."""
        from uvsdk import Verifier

        self.bundle_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.bundle_path, bundle)
        verifier = Verifier(self.bundle_path, store=self.store)
        report = verifier.enroll(self.data, user=self.user, target_tpr=target_tpr)
        return {"enrolled": True, "mode": report.mode, "samples": report.used}


def code_from_request(request: dict[str, Any]) -> Code | None:
    """The BCH code the server sent at registration (a method whose devices hold a codeword), or
    ``None``."""
    if not request.get("generator"):
        return None
    n, k = int(request["n"]), int(request["k"])
    generator = unpack_generator(str(request["generator"]), k, n)
    return Code("bch", n, k, int(request["d_min"]), int(request["id_bits"]), generator)
