"""`CompressedDownload`: the client stage (fedsuite/stages/client.py) of compressed downlinks
(docs/running/compression.md#downlink; the scheme is described in fedsuite/stages/downlink.py). In a fit it rebuilds
each broadcast vector's public copy v̂ before anything reads the message: from v̂ whole when the server sent it,
else from the client's own copy (its declared state `downlink_<vector>`, as of the last round the server accepted
from it) plus the decoded messages of the rounds since, in round order. The copy is checked against the server's
CRC-32, kept in the client's state (saved with the rest of it when the round ends) and put in the message in the
vector's place, so the client's rule trains from v̂. An evaluation carries the exact model and nothing for this
stage, so it changes nothing there.
"""

from __future__ import annotations

import torch

from fedsuite.compression.base import Encoded
from fedsuite.compression.bits import to_bytes
from fedsuite.compression.randk import RandK, draw_seed
from fedsuite.stages.client import ClientStage
from fedsuite.stages.downlink import CHECK, SUFFIX, WHOLE, DownlinkCompression, checksum, state_name


class CompressedDownload(ClientStage):
    def __init__(self, compression: DownlinkCompression, client_rule):
        """`client_rule`: the client's ClientRule (its state holds the copies)."""
        self.compression, self.client_rule = compression, client_rule

    @classmethod
    def of_client(cls, cfg, client_rule) -> CompressedDownload | None:
        compression = DownlinkCompression.of_run(cfg)
        return None if compression is None else cls(compression, client_rule)

    def receive(self, down: dict, node) -> None:
        """Each broadcast vector of a fit message rebuilt in its place (an evaluation carries none of its arrays)."""
        for vector in self.compression.vectors:
            parts = _taken(down, vector)
            if CHECK not in parts:
                continue
            expected = int.from_bytes(to_bytes(parts.pop(CHECK)), "little")
            copy = self._rebuilt(vector, parts, node)
            if checksum(copy) != expected:
                raise ValueError(f"compressed downlink: this client's copy of {vector!r} does not match the server's "
                                 "(CRC-32); its client state is not the one of the last accepted round")  # fmt: skip
            self.client_rule.state.set(state_name(vector), copy)  # the state keeps a copy of its own
            down[vector] = copy

    def _rebuilt(self, vector: str, parts: dict[str, torch.Tensor], node) -> torch.Tensor:
        """v̂ from the vector's arrays: whole, or the client's copy moved by each round's message in order."""
        if WHOLE in parts:
            return parts[WHOLE].to(torch.float32)
        state, name = self.client_rule.state, state_name(vector)
        if parts and not state.has(name):
            raise ValueError(f"compressed downlink: the server sent changes of {vector!r}, but this client holds no "
                             "copy of it (client state lost?)")  # fmt: skip
        copy = state.get(name).to(device=node.device, dtype=torch.float32)
        for server_round in sorted(int(r) for r in parts):
            copy = copy + self._decoded(vector, server_round, parts[str(server_round)], copy.numel(), node.device)
        return copy

    def _decoded(self, vector: str, server_round: int, message: torch.Tensor, dim: int, device) -> torch.Tensor:
        compressor = self.compression.compressor
        seed = None
        if isinstance(compressor, RandK):  # the round's coordinates, drawn as the server drew them
            seed = draw_seed(self.compression.generator(server_round, vector))
        return compressor.decompress(Encoded(to_bytes(message), seed), dim, device).to(torch.float32)


def _taken(down: dict, vector: str) -> dict[str, torch.Tensor]:
    """The arrays of `vector`'s broadcast, taken out of `down`, by what follows the suffix (a round, 'full' or
    'crc')."""
    prefix = vector + SUFFIX
    names = [name for name in down if name.startswith(prefix)]
    return {name[len(prefix) :]: down.pop(name) for name in names}
