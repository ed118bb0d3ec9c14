"""What every server of a Flower run does with its devices before any round: wait for them,
ask them (a query to each, every answer checked), and register them: the user ids of the run's
roster, never reused (``OUT/devices.json``). A training run (:class:`uvdeploy.server.
FederatedServer`) and a chain's-mean run (:class:`uvdeploy.centre.CentreServer`) are both this."""

from __future__ import annotations

import secrets
import time
from typing import Any

from flwr.app import ConfigRecord, Message, RecordDict

from uvtrain.io import REGISTRY, read_json, write_json
from uvtrain.progress import duration_text

from .errors import DeploymentError

#: Seconds the server waits for ``min_devices`` before it says how many are connected.
WAIT_LINE_SECONDS = 10.0
#: The most samples a device may report at registration: its weight in a plain round's mean
#: (docs/deploy.md, "Malicious devices").
MAX_DEVICE_SAMPLES = 10**9


class DeviceRoster:
    """The device-facing half of a server: needs ``settings``, ``grid``, ``echo``, ``folder``
    and ``code`` (the run's BCH code, or ``None``); :meth:`register` sets ``roster`` and
    ``samples``."""

    settings: Any
    grid: Any
    echo: Any
    folder: Any
    code: Any

    # -- devices -------------------------------------------------------------------------------

    def _query(self, requests: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        messages = [
            Message(
                RecordDict({"uvtrain": ConfigRecord(body)}), dst_node_id=node, message_type="query"
            )
            for node, body in requests.items()
        ]
        replies: dict[int, dict[str, Any]] = {}
        errors = []
        for reply in self.grid.send_and_receive(messages, timeout=self.settings.wait_seconds):
            node = reply.metadata.src_node_id
            if reply.has_error():
                errors.append(f"device {node}: {reply.error.reason}")
            else:
                replies[node] = dict(reply.content.config_records["uvtrain"])
        missing = len(requests) - len(replies) - len(errors)
        if errors or missing:
            first = errors[0] if errors else f"{missing} did not answer"
            raise DeploymentError(
                f"{len(errors) + missing} of {len(requests)} device(s) failed ({first})"
            )
        return replies

    def wait_for_devices(self) -> list[int]:
        """The connected devices' node ids, once ``min_devices`` are connected. A line after
        :data:`WAIT_LINE_SECONDS`, then one each time the count changes (issue 47: a minute
        without a word); never a line while nothing changes, which a watcher of the log (``uvtrain
        deploy local``'s stall check) would take for progress."""
        started = time.monotonic()
        deadline = started + self.settings.wait_seconds
        said: int | None = None
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= self.settings.min_devices:
                return nodes
            waited = time.monotonic() - started
            if waited >= WAIT_LINE_SECONDS and len(nodes) != said:
                said = len(nodes)
                self.echo(
                    f"waiting for devices: {len(nodes)} of {self.settings.min_devices} "
                    f"connected after {duration_text(waited)} (waits at most "
                    f"{duration_text(self.settings.wait_seconds)})"
                )
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"{len(nodes)} device(s) connected after {self.settings.wait_seconds:.0f} s; "
                    f"min_devices is {self.settings.min_devices}"
                )
            time.sleep(0.5)

    def register(self, nodes: list[int], roster: list[int] | None) -> dict[int, int]:
        """Node id → the device's row (its index in the run's roster of user ids)."""
        fingerprint = self.code.fingerprint if self.code is not None else ""
        status = self._query({n: {"action": "status", "code_sha256": fingerprint} for n in nodes})
        registry_path = self.folder / REGISTRY
        registry = read_json(registry_path) if registry_path.exists() else {}
        assigned: list[int] = list(registry.get("assigned", []))
        ids: dict[int, int] = {}
        to_assign: dict[int, dict[str, Any]] = {}
        for node in nodes:
            problem = self._status_problem(status[node])
            if problem is not None:
                self.echo(f"device {node}'s status refused ({problem}): left out of this run")
                continue
            user_id = int(status[node]["user_id"])
            if user_id < 0:
                user_id = secrets.randbits(self.code.id_bits if self.code else 32)
                while user_id in assigned or user_id in ids.values():
                    user_id = secrets.randbits(self.code.id_bits if self.code else 32)
            elif user_id in ids.values():
                self.echo(f"a second device reports user id {user_id}: left out of this run")
                continue
            ids[node] = user_id
            if user_id not in assigned:
                assigned.append(user_id)
            if int(status[node]["user_id"]) < 0 or (self.code and not status[node]["codeword"]):
                body: dict[str, Any] = {"action": "assign", "user_id": user_id}
                if self.code is not None:
                    from uvsdk.codeword import pack_generator

                    body.update(
                        n=self.code.n,
                        k=self.code.k,
                        d_min=self.code.d_min,
                        id_bits=self.code.id_bits,
                        generator=pack_generator(self.code.generator),
                    )
                to_assign[node] = body
        # every id ever given is kept before any device hears of it: never reused
        write_json(registry_path, {"assigned": assigned})
        if to_assign:
            self._query(to_assign)
        if roster is None:
            roster = sorted(ids.values())
        rows = {node: roster.index(uid) for node, uid in ids.items() if uid in roster}
        for uid in ids.values():
            if uid not in roster:
                self.echo(f"device with user id {uid} joined after this run began: left out")
        self.samples = {node: int(status[node]["samples"]) for node in rows}
        self.echo(
            f"{len(rows)} device(s) registered ({len(to_assign)} newly assigned), "
            f"{sum(self.samples.values())} samples"
        )
        self.roster = roster
        return rows

    def _status_problem(self, reply: dict[str, Any]) -> str | None:
        """What is wrong with a device's registration reply (its user id: -1 or an id of the
        run's width; its sample count: 1 to 10^9; whether it holds a codeword: a bool), or
        ``None``: read before any of it is used."""
        bits = self.code.id_bits if self.code else 32
        user_id, samples = reply.get("user_id"), reply.get("samples")
        if not _integer(user_id) or not -1 <= user_id < 2**bits:
            return f"user id not -1 or an integer of {bits} bits"
        if not _integer(samples) or not 1 <= samples <= MAX_DEVICE_SAMPLES:
            return f"sample count not an integer in [1, {MAX_DEVICE_SAMPLES}]"
        if type(reply.get("codeword")) is not bool:
            return "codeword not true or false"
        return None


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
