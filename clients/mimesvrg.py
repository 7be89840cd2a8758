"""MimeSVRG client (Karimireddy et al., Mime with SGD base and the SVRG control variate; docs/algorithms/mimesvrg.md).

Two messages per round, told apart by the fit config's `phase`:
- phase A, `phase = GRADIENT_PHASE` (the gradient query): return ∇F_i(x^t), the mean-loss gradient over the whole
  local dataset (one pass, no augmentation, no weight decay), as the single array `GRADIENT_NAME`. This upload is
  what the LoSAC paper's DLG study attacks (docs/dlg/index.md).
- phase B (a normal fit): K_i steps x ← x − η_l·(g(x; ξ) − g(x^t; ξ) + c + wd·x), both gradients on the same
  minibatch, c = the server's mean of the phase-A gradients; uplink Δ_i. Stateless.
"""

from __future__ import annotations

import time

import torch

from clients.base import FedClient
from fedsuite.adaptive import ControlVariatePoint
from fedsuite.local import AddVector, UpdateRule, full_gradient
from fedsuite.payload import ARRAYS_KEY, pack, unpack
from fedsuite.rounds import PHASE_KEY

GRADIENT_PHASE = "full-gradient"
GRADIENT_NAME = "full_grad"


class MimeSVRGClient(FedClient):
    def rule(self, down, config) -> UpdateRule:
        return UpdateRule(point=ControlVariatePoint(down["model"]), clipped=(AddVector(down["c"]),))

    def _fit(self, parameters, config):  # inside FedClient.fit: a failure in either phase is an error reply
        if config.get(PHASE_KEY) == GRADIENT_PHASE:
            return self.full_gradient_reply(parameters, config)
        return super()._fit(parameters, config)

    def full_gradient_reply(self, parameters, config):
        node = self.node
        torch.set_num_threads(node.cfg.local.client_threads)
        start = time.perf_counter()
        x = torch.tensor(unpack(parameters, str(config[ARRAYS_KEY]))["model"], device=node.device)
        grad = full_gradient(node.model, x, node.data, node.loss_fn)
        if not bool(torch.isfinite(grad).all()):
            raise FloatingPointError(f"{GRADIENT_NAME} is not finite")
        arrays, names = pack({GRADIENT_NAME: grad.cpu().numpy()})
        metrics = {ARRAYS_KEY: names, "partition-id": node.partition_id, "compute-seconds": time.perf_counter() - start}
        return arrays, len(node.data), metrics
