"""The SDK's Python API: :class:`Verifier` loads a bundle, enrolls users and verifies them.

The ``uvsdk`` command is a thin layer over this class, so an app that embeds the SDK gets exactly
what the command does::

    from uvsdk import Verifier

    verifier = Verifier("voice.uvb", store="~/.myapp/templates", passphrase=ask_user)
    report = verifier.enroll("enrollment_clips/", user="alice")
    decision = verifier.verify("attempt.wav", user="alice")
    if decision.accepted:
        ...
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import backoff as backoff_rules
from .bundle import Bundle, Code, Manifest
from .calibration import (
    DEFAULT_FAR,
    HeldOutRow,
    check_far,
    normalised_leave_one_out,
    rerecord_advised,
    user_threshold,
)
from .codeword import bipolar, encode, new_message, random_user_id
from .errors import (
    AttemptNotRecordedError,
    BundleError,
    EnrollmentError,
    MediaError,
    ModelMismatchError,
    NotEnrolledError,
    SignatureError,
    UvsdkError,
)
from .media import DEFAULT_MAX_SECONDS
from .scoring import (
    codeword_scores,
    cosine_scores,
    leave_one_out_scores,
    prototype,
    warmup_threshold,
)
from .template import PassphraseSource, Template, TemplateStore

MIN_ENROLLMENT_SAMPLES = 5
DEFAULT_TARGET_TPR = 0.95
_VERIFIER_FAR: Any = object()  # enroll(far=...) not given: the Verifier's own
WINDOW_BATCH = 16  # windows per model call: bounds memory for long clips
_SEARCH_ORDER = "pass a bundle (--bundle PATH) or set UVSDK_BUNDLE"
REQUESTED_MODES = ("auto", "prototype", "codeword")
"""The enrollment modes a caller may ask for (docs/spec.md §9.1 step 5)."""


@dataclass(frozen=True)
class SampleReport:
    """What enrollment did with one file: used, or skipped and why (``reason``)."""

    file: str
    used: bool
    reason: str | None = None
    detail: str = ""
    seconds: float | None = None
    windows: int = 0


@dataclass(frozen=True)
class EnrollmentReport:
    """The outcome of :meth:`Verifier.enroll` (it holds no secret: no threshold, no reference).

    ``far`` is the FAR the threshold was floored at, ``None`` when the bundle has no calibration
    for the mode (or ``far=None`` was asked): then the threshold is the warm-up rule alone.
    ``expected_far`` and ``expected_frr`` are what the bundle's calibration measured at the
    user's threshold (text such as ``"0.0094"`` or ``"< 0.001"``; the FRR is ``None`` for
    codeword mode, whose calibration has no genuine trials). ``floored`` says the calibrated
    threshold was above the warm-up one; ``own_rejected`` counts the user's own enrollment
    samples (leave-one-out) that their threshold would reject, and ``advice`` is the re-record
    advice when that is more than the target TPR allows and than the table's FRR makes likely
    (:func:`uvsdk.calibration.rerecord_advised`). ``held_out`` is what the user's threshold (a
    calibrated row's) did on recording chains it was not fitted on, when the table measured it
    (:class:`uvsdk.calibration.HeldOut`), and ``held_out_chains``/``held_out_seconds`` how many
    chains and which clip length it counts: the figures the user should expect.
    """

    user: str
    mode: str
    target_tpr: float
    samples: tuple[SampleReport, ...]
    template: Path
    far: float | None = None
    expected_far: str | None = None
    expected_frr: str | None = None
    floored: bool = False
    own_rejected: int = 0
    advice: str | None = None
    held_out: HeldOutRow | None = None
    held_out_chains: int | None = None
    held_out_seconds: float | None = None

    @property
    def used(self) -> int:
        """How many samples were used."""
        return sum(sample.used for sample in self.samples)

    @property
    def calibrated(self) -> bool:
        """Whether the threshold was floored by the bundle's calibration."""
        return self.far is not None


@dataclass(frozen=True)
class Decision:
    """One verification: the score, the user's threshold and whether ``score >= threshold``."""

    file: str
    score: float
    threshold: float
    accepted: bool


def check_mode(requested: str, manifest: Manifest) -> None:
    """Refuse, before any work, a mode that is unknown or that the bundle cannot give.

    Raises
    ------
    EnrollmentError
        ``requested`` is not one of :data:`REQUESTED_MODES`, or is ``codeword`` on an embedding bundle.
    """
    if requested not in REQUESTED_MODES:
        raise EnrollmentError(
            f"the enrollment mode must be auto, prototype or codeword, not {requested!r:.40}",
            code="enroll.mode",
        )
    if requested == "codeword" and manifest.code is None:
        raise EnrollmentError(
            "codeword mode needs a codeword bundle, and this bundle outputs embeddings",
            code="enroll.mode",
        )


def enrollment_mode(requested: str, manifest: Manifest, holds_codeword: bool) -> str:
    """The mode enrollment uses (docs/spec.md §9.1 step 5).

    Parameters
    ----------
    requested:
        ``auto``: codeword mode iff the user holds a codeword, the bundle is a codeword bundle and
        its manifest's ``training.enrollment`` is not ``prototype`` (a DP-trained FedUV bundle
        enrolls by prototype: codeword mode is bounded by the privacy guarantee there).
        ``prototype``: always prototype mode. ``codeword``: codeword mode, or an error.
    manifest:
        The bundle's manifest.
    holds_codeword:
        Whether the user's template holds a codeword.

    Returns
    -------
    str
        ``codeword`` or ``prototype``.

    Raises
    ------
    EnrollmentError
        An unknown mode; ``codeword`` on an embedding bundle or for a user without a codeword.
    """
    check_mode(requested, manifest)
    if requested == "codeword":
        if not holds_codeword:
            raise EnrollmentError(
                "codeword mode needs the user's codeword, and this user holds none: make one "
                "with uvsdk codeword new, or enroll in prototype mode",
                code="enroll.mode",
            )
        return "codeword"
    training = manifest.training
    by_prototype = training is not None and training.enrollment == "prototype"
    if requested == "auto" and holds_codeword and manifest.code is not None and not by_prototype:
        return "codeword"
    return "prototype"


def default_bundle_path() -> Path:
    """``$UVSDK_BUNDLE``, else the bundle shipped in the package, else a :class:`BundleError`."""
    from_environment = os.environ.get("UVSDK_BUNDLE")
    if from_environment:
        return Path(from_environment).expanduser()
    shipped = Path(__file__).parent / "data" / "default.uvb"
    if shipped.is_file():
        return shipped
    raise BundleError(
        f"no model bundle: {_SEARCH_ORDER} (the default bundle is missing from this installation)",
        code="bundle.not-found",
    )


def default_store_dir() -> Path:
    """``$UVSDK_STORE``, else the platform's user data folder (``.../uvsdk/templates``)."""
    from_environment = os.environ.get("UVSDK_STORE")
    if from_environment:
        return Path(from_environment).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("uvsdk", appauthor=False)) / "templates"


def trusted_keys_from_environment() -> list[str]:
    """PEM paths from ``$UVSDK_TRUSTED_KEYS`` (separated by ``os.pathsep``).

    Unset or empty: no keys (signatures are not checked). Set to something that names no key
    (``":"``, spaces): a :class:`SignatureError`, since silently checking nothing would turn
    the signature check off by mistake.
    """
    value = os.environ.get("UVSDK_TRUSTED_KEYS", "")
    if not value:
        return []
    keys = [part for part in value.split(os.pathsep) if part.strip()]
    if not keys:
        raise SignatureError(
            "UVSDK_TRUSTED_KEYS is set but names no key file: give PEM paths separated by "
            f"{os.pathsep!r}, or unset it",
            code="bundle.trusted-key",
        )
    return keys


class Verifier:
    """Enroll and verify users with one model bundle and one template store.

    Parameters
    ----------
    bundle:
        A ``.uvb`` path, an unpacked bundle folder, or a loaded :class:`Bundle`. Default:
        ``$UVSDK_BUNDLE``, else the bundle shipped with the package. Loaded on first use.
    store:
        The template folder (default ``$UVSDK_STORE``, else the platform's user data folder).
    passphrase:
        A string or a callable ``(confirm) -> str`` (default: ``$UVSDK_PASSPHRASE``, else a hidden
        prompt on a terminal). Asked only when a template is opened or created.
    use_keyring:
        Protect new templates with a random key in the OS keyring instead of a passphrase.
    freshness:
        Where each template's write generation is also kept, so a rolled-back template is
        refused: ``"keyring"`` (rollback-proof against anyone without the unlocked keyring; the
        default with ``use_keyring``) or ``"file"`` (a state folder outside the store: detects a
        template put back on its own; the default otherwise). See docs/sdk.md's threat model.
    trusted_keys:
        Ed25519 public keys (PEM paths or key objects); when set, unsigned or wrongly signed
        bundles are refused. Default: ``$UVSDK_TRUSTED_KEYS``.
    threads:
        ONNX Runtime intra-op threads (default: its own choice).
    backoff:
        Lock-out policy written into templates at enrollment (see :mod:`uvsdk.backoff`).
    max_seconds:
        Longest audio clip accepted (memory stays bounded whatever the file).
    clock:
        Returns Unix time; replaceable for tests.
    far:
        The false-accept rate enrollment sets thresholds at (default 0.01), docs/spec.md §4.3:
        with a prototype table (it has genuine trials) a user's threshold is the table's
        threshold at ``far``; with a codeword table (none) ``max(warm-up threshold, the table's
        threshold at far)``; a table's threshold is never used below
        :data:`uvsdk.calibration.THRESHOLD_FLOOR`. ``None``: the warm-up rule alone, and so for
        a bundle without calibration (the enrollment report says so). See
        :mod:`uvsdk.calibration`.
    lock_timeout, on_lock_wait:
        How long one holder may keep a user's lock before an operation gives up
        (``store.locked``), and who is told, once, that an operation is waiting for it
        (:class:`TemplateStore`; used only when ``store`` is a folder).
    """

    def __init__(
        self,
        bundle: str | Path | Bundle | None = None,
        *,
        store: str | Path | TemplateStore | None = None,
        passphrase: PassphraseSource = None,
        use_keyring: bool = False,
        freshness: str | None = None,
        trusted_keys: Sequence[Any] | None = None,
        threads: int | None = None,
        backoff: backoff_rules.BackoffPolicy | None = None,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        clock: Callable[[], float] = time.time,
        far: float | None = DEFAULT_FAR,
        lock_timeout: float | None = None,
        on_lock_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.far = None if far is None else check_far(far)
        self._bundle = bundle if isinstance(bundle, Bundle) else None
        self._bundle_path = None if isinstance(bundle, Bundle) else bundle
        if isinstance(store, TemplateStore):
            self.store = store
        else:
            directory = Path(store).expanduser() if store else default_store_dir()
            self.store = TemplateStore(
                directory,
                passphrase=passphrase,
                use_keyring=use_keyring,
                freshness=freshness or ("keyring" if use_keyring else "file"),
                lock_timeout=lock_timeout,
                on_lock_wait=on_lock_wait,
            )
        self.trusted_keys = (
            list(trusted_keys) if trusted_keys is not None else trusted_keys_from_environment()
        )
        self.threads = threads
        self.backoff_policy = backoff or backoff_rules.BackoffPolicy()
        self.max_seconds = max_seconds
        self.clock = clock

    @property
    def bundle(self) -> Bundle:
        """The model bundle, loaded and checked on first use."""
        if self._bundle is None:
            path = Path(self._bundle_path) if self._bundle_path else default_bundle_path()
            self._bundle = Bundle(path, trusted_keys=self.trusted_keys, threads=self.threads)
        return self._bundle

    # -- embeddings ------------------------------------------------------------------------

    def embed(self, source: str | Path | np.ndarray, *, allow_clipped: bool = True) -> np.ndarray:
        """The model's vector for one file or one decoded input (windows averaged).

        ``source`` is a path, or an array: mono float32 audio at the bundle's sample rate, or a
        ``uint8`` image already at the bundle's size. Raises :class:`MediaError` on bad input.
        """
        vector, _ = self._embed(source, allow_clipped=allow_clipped)
        return vector

    def _embed(
        self, source: str | Path | np.ndarray, *, allow_clipped: bool
    ) -> tuple[np.ndarray, dict]:
        spec = self.bundle.manifest.input
        name = Path(source).name if isinstance(source, str | Path) else "input"
        if isinstance(source, np.ndarray):
            sample = spec.from_array(source)
        else:
            sample = spec.load(source, max_seconds=self.max_seconds)
        spec.check(sample, name=name, allow_clipped=allow_clipped)
        sample = spec.trim(sample)
        total, windows = np.zeros(self.bundle.manifest.dim, dtype=np.float64), 0
        for batch in spec.windows(sample, WINDOW_BATCH):
            total += self.bundle.run(batch).sum(axis=0, dtype=np.float64)
            windows += len(batch)
        vector = total / windows
        info = {"seconds": spec.seconds(sample), "windows": windows}
        return vector.astype(np.float32), info

    # -- codewords -------------------------------------------------------------------------

    def new_codeword(
        self, user: str = "default", user_id: int | None = None, *, code: Code | None = None
    ) -> int:
        """Make the user's secret FedUV codeword and keep it, encrypted, in the store.

        The message is the user id bits (server-assigned; random when ``None``) followed by random
        bits from :mod:`secrets`; the codeword is ``m·G mod 2`` with the bundle's generator, or
        with ``code`` when given (a device joining federated training before any bundle exists
        gets the code from the server). Returns the user id (not secret: it is what the server
        assigned). The codeword itself is never returned, printed or written in clear.
        """
        if code is None:
            code = self.bundle.manifest.code
        if code is None:
            raise BundleError(
                f"{self.bundle.path.name} outputs embeddings, not codewords: "
                "codeword new needs a codeword bundle",
                code="bundle.wrong-kind",
            )
        with self.store.locked(user, create=True):
            existing = self.store.load(user) if self.store.exists(user) else None
            if existing is not None and existing.codeword is not None:
                raise UvsdkError(
                    f"user {user!r} already has a codeword; delete the template first "
                    f"(uvsdk delete --user {user}) if you really mean to replace it",
                    code="codeword.exists",
                )
            chosen_id = random_user_id(code.id_bits) if user_id is None else int(user_id)
            bits = encode(new_message(chosen_id, code.id_bits, code.k), code.generator)
            base = existing or Template(user=user, created=self.clock())
            self.store.save(
                base.replace(codeword=bits, user_id=chosen_id, code_sha256=code.fingerprint)
            )
        return chosen_id

    # -- enrollment ------------------------------------------------------------------------

    def enroll(
        self,
        samples: str | Path | Iterable[str | Path],
        user: str = "default",
        target_tpr: float = DEFAULT_TARGET_TPR,
        *,
        on_sample: Callable[[SampleReport], None] | None = None,
        far: float | None = _VERIFIER_FAR,
        mode: str = "auto",
    ) -> EnrollmentReport:
        """Enroll a user from at least five usable samples.

        The threshold is the bundle's calibrated threshold at ``far`` (default: the verifier's
        ``far``), or the warm-up rule at ``target_tpr`` without one (docs/spec.md §4.3; the
        class's ``far``).

        ``mode`` (:func:`enrollment_mode`): ``auto`` is codeword mode when the user already holds
        a codeword (``new_codeword``), the bundle is a codeword bundle and its manifest does not
        say ``training.enrollment: prototype`` (a DP-trained FedUV bundle); ``prototype`` always
        enrolls by prototype; ``codeword`` insists on the codeword, an :class:`EnrollmentError`
        without one. The codeword must be of the bundle's code. Unusable files (too short,
        silent, clipped, undecodable, ...) are skipped and reported through ``on_sample`` and the
        report; fewer than five usable ones is an :class:`EnrollmentError` and nothing is written.
        """
        if not 0.0 < target_tpr <= 1.0:
            raise UvsdkError(
                f"the target TPR must be in (0, 1], not {target_tpr}", code="argument.invalid"
            )
        if far is _VERIFIER_FAR:
            far = self.far
        far = None if far is None else check_far(far)
        self.store.path(user)  # validates the name before any work
        manifest = self.bundle.manifest
        check_mode(mode, manifest)
        calibration = manifest.calibration
        if far is not None and calibration is not None:
            for table in calibration.tables.values():
                table.row_for(far)  # a FAR the calibration cannot state: before any work
        files = _list_samples(samples)
        self.store.ask_new_passphrase(user)  # before the samples are embedded
        reports, vectors = [], []
        for file in files:
            try:
                vector, info = self._embed(file, allow_clipped=False)
            except MediaError as error:
                report = SampleReport(str(file), False, error.reason, str(error))
            else:
                vectors.append(vector)
                report = SampleReport(
                    str(file), True, seconds=info["seconds"], windows=info["windows"]
                )
            reports.append(report)
            if on_sample:
                on_sample(report)
        if len(vectors) < MIN_ENROLLMENT_SAMPLES:
            raise EnrollmentError(
                f"only {len(vectors)} usable sample(s) of {len(files)}: at least "
                f"{MIN_ENROLLMENT_SAMPLES} are needed; nothing was enrolled"
            )
        matrix = np.stack(vectors)
        with self.store.locked(user, create=True):
            existing = self.store.load(user) if self.store.exists(user) else None
            base = existing or Template(user=user, created=self.clock())
            mode = enrollment_mode(mode, manifest, base.codeword is not None)
            if mode == "codeword":
                assert manifest.code is not None and base.codeword is not None
                if base.code_sha256 != manifest.code.fingerprint:
                    raise ModelMismatchError(
                        f"user {user!r}'s codeword was made for another code than "
                        f"{self.bundle.path.name}'s; make a new one with uvsdk codeword new"
                    )
                reference = None
                scores = codeword_scores(bipolar(base.codeword), matrix)
            else:
                matrix = self.bundle.centred(matrix)
                reference = prototype(matrix).astype(np.float32)
                cohort = self.bundle.cohort
                if cohort is None:
                    scores = leave_one_out_scores(matrix)
                else:
                    scores = normalised_leave_one_out(matrix, cohort)
            threshold, row = user_threshold(scores, target_tpr, calibration, mode, far)
            floored = row is not None and row.threshold > warmup_threshold(scores, target_tpr)
            template = base.replace(
                mode=mode,
                prototype=reference,
                threshold=threshold,
                target_tpr=target_tpr,
                far=far if row is not None else None,
                calibration=calibration.sha256 if calibration is not None and row else None,
                cohort=manifest.score_scale if mode == "prototype" else None,
                model_sha256=manifest.model_sha256,
                enrolled=self.clock(),
                samples=len(vectors),
                policy=self.backoff_policy,
                backoff=backoff_rules.BackoffState(),
            )
            path = self.store.save(template)
        expected_far = expected_frr = advice = held_out = None
        own_rejected = int(np.count_nonzero(scores < threshold))
        if row is not None:
            assert calibration is not None
            table = calibration.tables[mode]
            expected_far, expected_frr = table.expected(threshold)
            if table.held_out is not None and threshold == row.threshold:
                held_out = table.held_out
            if rerecord_advised(own_rejected, len(scores), target_tpr, row):
                advice = (
                    f"{own_rejected} of your {len(scores)} samples score below the bundle's "
                    f"calibrated threshold: they vary more than one person's usually do. "
                    "Re-record them in one quiet place, with the same microphone, speaking "
                    "normally, then enroll again"
                )
        return EnrollmentReport(
            user,
            mode,
            target_tpr,
            tuple(reports),
            path,
            far=far if row is not None else None,
            expected_far=expected_far,
            expected_frr=expected_frr,
            floored=floored,
            own_rejected=own_rejected,
            advice=advice,
            held_out=None if held_out is None or row is None else held_out.row_for(row.far),
            held_out_chains=None if held_out is None else held_out.chains,
            held_out_seconds=None if held_out is None else held_out.min_seconds,
        )

    # -- verification ----------------------------------------------------------------------

    def _enrolled_template(self, user: str) -> Template:
        bundle = self.bundle  # a missing or broken model is reported before the template
        template = self.store.load(user)
        if not template.is_enrolled:
            raise NotEnrolledError(
                f"user {user!r} has a codeword but is not enrolled yet (run uvsdk enroll)"
            )
        if template.model_sha256 != bundle.manifest.model_sha256:
            raise ModelMismatchError(
                f"user {user!r} was enrolled with another model than {bundle.path.name}: "
                "re-enroll with uvsdk enroll"
            )
        if template.mode == "prototype" and template.cohort != bundle.manifest.score_scale:
            raise ModelMismatchError(
                f"user {user!r} was enrolled with another score normalisation (cohort or rule) than "
                f"{bundle.path.name}'s: re-enroll with uvsdk enroll"
            )
        calibration = bundle.manifest.calibration
        if template.calibration is not None and (
            calibration is None or template.calibration != calibration.sha256
        ):
            # The threshold came from a calibration this bundle does not carry: a manifest swapped
            # for one enrollment must not leave its threshold behind (docs/spec.md §9.2).
            raise ModelMismatchError(
                f"user {user!r} was enrolled under another calibration than {bundle.path.name}'s: "
                "re-enroll with uvsdk enroll"
            )
        return template

    def _score(self, template: Template, vector: np.ndarray) -> float:
        if template.mode == "codeword":
            if template.codeword is None:
                raise NotEnrolledError(f"user {template.user!r}'s template has no codeword")
            value = codeword_scores(bipolar(template.codeword), vector[None])[0]
        else:
            if template.prototype is None:
                raise NotEnrolledError(f"user {template.user!r}'s template has no prototype")
            vector = self.bundle.centred(vector)
            value = cosine_scores(template.prototype, vector[None])[0]
            cohort = self.bundle.cohort
            if cohort is not None:
                value = cohort.normalise(value, template.prototype, vector)[0]
        return float(value)

    def score(self, source: str | Path | np.ndarray, user: str = "default") -> float:
        """The user's score for one input, with no decision and no back-off bookkeeping.

        Meant for the template's owner (evaluation); apps deciding access use :meth:`verify`.
        """
        template = self._enrolled_template(user)
        return self._score(template, self.embed(source))

    def verify(
        self, source: str | Path | np.ndarray, user: str = "default", *, backoff: bool = True
    ) -> Decision:
        """Accept iff the score reaches the user's threshold (set at enrollment).

        With ``backoff`` (the default) a locked-out user gets :class:`LockedOutError` before
        anything is computed, and the attempt is written into the encrypted template as a
        failure *before* the score is computed: if it cannot be written (full disk, read-only
        store, deleted template) verification is refused with :class:`AttemptNotRecordedError`
        and no score is revealed. An acceptance then resets the count (if that second write
        fails, the decision stands and the count stays one too high: the safe side). An input
        that cannot be decoded is not an attempt.
        """
        name = str(source) if isinstance(source, str | Path) else "input"
        _ = self.bundle  # loaded (or refused) before the user's lock is taken, never under it
        if not backoff:
            template = self._enrolled_template(user)
            value = self._score(template, self.embed(source))
            return Decision(name, value, float(template.threshold), value >= template.threshold)
        with self.store.locked(user):
            template = self._enrolled_template(user)
            now = self.clock()
            backoff_rules.check(template.backoff, user, now)
            vector = self.embed(source)
            failed = backoff_rules.record(template.backoff, template.policy, False, now)
            try:
                self.store.save(template.replace(backoff=failed), create=False)
            except NotEnrolledError:  # deleted meanwhile: say so, not "cannot be recorded"
                raise
            except UvsdkError as error:
                raise AttemptNotRecordedError(
                    f"verification refused: the attempt cannot be recorded ({error})"
                ) from None
            value = self._score(template, vector)
            accepted = value >= template.threshold
            if accepted:
                with contextlib.suppress(UvsdkError):
                    self.store.save(template.replace(backoff=backoff_rules.BackoffState()))
        return Decision(name, value, float(template.threshold), accepted)

    def delete(self, user: str = "default") -> None:
        """Remove the user's template."""
        with self.store.locked(user):
            self.store.delete(user)


def _list_samples(samples: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(samples, str | Path):
        folder = Path(samples).expanduser()
        if not folder.exists():
            raise EnrollmentError(f"samples folder not found: {folder}", code="enroll.samples")
        if not folder.is_dir():
            raise EnrollmentError(f"not a folder: {folder}", code="enroll.samples")
        try:
            files = sorted(
                p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
            )
        except OSError as error:
            raise EnrollmentError(
                f"cannot read {folder} ({error.strerror or error})", code="enroll.samples"
            ) from None
        if not files:
            raise EnrollmentError(f"the samples folder {folder} is empty", code="enroll.samples")
        return files
    files = [Path(p) for p in samples]
    if not files:
        raise EnrollmentError("no samples given", code="enroll.samples")
    return files
