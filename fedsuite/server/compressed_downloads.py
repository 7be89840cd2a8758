"""`CompressedBroadcast`: the server stage (fedsuite/stages/server.py) of compressed downlinks
(docs/running/compression.md#downlink; the scheme is described in fedsuite/stages/downlink.py).

Once a round, before the first message leaves, it moves each broadcast vector's public copy v̂ by the compressed
change, v̂ ← v̂ + C(v − v̂), and logs the message's bytes; the first time a vector is broadcast, v̂ is the vector
itself. Then each client gets, per vector (`addressed`):
- nothing, when its copy is current;
- the messages of the rounds after the last round the server accepted from it, as `<vector>@down<round>` uint8
  arrays, when the log still holds them all and they are fewer bytes than v̂ (4 bytes a coordinate);
- else v̂ whole, as `<vector>@downfull` (float32): a client's first round, or one that was away long.
The log keeps the newest messages that are together still cheaper than v̂, so it never holds more than about the
bytes of one vector more than that. Beside them travels the CRC-32 of the current copy (`<vector>@downcrc`, 4 bytes),
which the client checks after rebuilding its own. v̂, the log and the round it starts from are checkpointed stage state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedsuite.stages.downlink import DownlinkCompression, check_name, checksum, message_name, whole_name
from fedsuite.stages.server import ServerStage

STATE = "downlink_copies"  # the strategy's checkpointed state of this stage


class CompressedBroadcast(ServerStage):
    state_name = STATE

    def __init__(self, compression: DownlinkCompression):
        self.compression = compression
        self.copies: dict[str, np.ndarray] = {}  # vector -> v̂ (float32)
        self.log: dict[str, list[tuple[int, np.ndarray]]] = {}  # vector -> [(round, message bytes)], oldest first
        self.since: dict[str, int] = {}  # vector -> the round after which the log holds every change of v̂
        self.made = 0  # the last round whose messages were made
        self.checks: dict[str, int] = {}  # this round: vector -> CRC-32 of v̂

    @classmethod
    def of_run(cls, run_config) -> CompressedBroadcast | None:
        compression = DownlinkCompression.of_run(run_config)
        return None if compression is None else cls(compression)

    def addressed(self, server_round: int, partition_id: int, accepted_round: int,
                  shared: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
        """What one client gets in place of the shared broadcast (with each copy's CRC-32), and no config entry."""
        if self.made != server_round:
            self._advance(server_round, shared)
        out = {name: value for name, value in shared.items() if name not in self.checks}
        for vector, crc in self.checks.items():
            out.update(self._catch_up(vector, accepted_round))
            out[check_name(vector)] = np.frombuffer(crc.to_bytes(4, "little"), np.uint8).copy()
        return out, {}

    def _advance(self, server_round: int, shared: Mapping[str, np.ndarray]) -> None:
        """This round's message of each broadcast vector, and the copies moved by them."""
        self.checks = {}
        for vector in self.compression.vectors:
            if vector not in shared:
                continue
            value = np.asarray(shared[vector], np.float32).reshape(-1)
            if vector not in self.copies:
                self.copies[vector], self.log[vector], self.since[vector] = value.copy(), [], server_round
            else:
                self.copies[vector] = self._moved(server_round, vector, value)
            self.checks[vector] = checksum(self.copies[vector])
        self.made = server_round

    def _moved(self, server_round: int, vector: str, value: np.ndarray) -> np.ndarray:
        """v̂ + C(v − v̂), decoded from the very bytes the clients get; the message logged."""
        compressor, copy = self.compression.compressor, self.copies[vector]
        change = torch.from_numpy(value - copy)
        encoded = compressor.compress(change, self.compression.generator(server_round, vector))
        sent = compressor.decompress(encoded, copy.size).numpy()
        log = self.log[vector]
        log.append((server_round, np.frombuffer(encoded.data, np.uint8).copy()))
        whole = 4 * copy.size
        while log and sum(message.nbytes for _, message in log[1:]) >= whole:
            self.since[vector] = log.pop(0)[0]
        return copy + sent

    def _catch_up(self, vector: str, accepted_round: int) -> dict[str, np.ndarray]:
        """The arrays that bring a client's copy of `vector` from the round it was last accepted to this round's."""
        if accepted_round >= self.since[vector]:
            messages = [(r, message) for r, message in self.log[vector] if r > accepted_round]
            if sum(message.nbytes for _, message in messages) < 4 * self.copies[vector].size:
                return {message_name(vector, r): message for r, message in messages}
        return {whole_name(vector): self.copies[vector]}

    def state_dict(self) -> dict[str, Any]:
        return {"copies": {k: v.copy() for k, v in self.copies.items()},
                "log": {k: [(r, m.copy()) for r, m in entries] for k, entries in self.log.items()},
                "since": dict(self.since), "made": self.made}  # fmt: skip

    def load_state_dict(self, values: Any) -> None:
        if not isinstance(values, dict) or set(values) != {"copies", "log", "since", "made"}:
            raise ValueError(f"{STATE}: expected a dict of copies, log, since and made, got {values!r:.80}")
        self.copies = {str(k): np.asarray(v, np.float32).copy() for k, v in values["copies"].items()}
        self.log = {str(k): [(int(r), np.asarray(m, np.uint8)) for r, m in v] for k, v in values["log"].items()}
        self.since = {str(k): int(v) for k, v in values["since"].items()}
        self.made = int(values["made"])
        self.checks = {}
