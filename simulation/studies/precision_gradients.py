"""The precision study's gradient check (docs/precision-study/index.md): how far bf16 autocast moves the per-client
gradients of the 2NN from float64 ones, stacked (the batched engine's) and one model at a time; run with
`python -m simulation.studies.precision --gradients`."""

from __future__ import annotations

from simulation.experiment import report


def gradient_check(clients: int = 10, batch: int = 50, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per-client gradients of the 2NN on `clients` minibatches of `batch` random Fashion-MNIST-shaped inputs with
    random labels, at client models spread around one initial model: stacked (fedsuite/batched/model.py) and one
    model at a time, in float32 and under bf16 autocast. Returns, per precision, the relative distance
    ‖g − g₆₄‖ / ‖g₆₄‖ of each from the float64 gradients (one at a time), and of the stacked gradients from the
    one-at-a-time ones."""
    import copy

    import torch
    import torch.nn.functional as F

    from fedsuite.batched.model import StackedModel
    from fedsuite.models.networks import FlatModel, build_model

    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(clients, batch, 1, 28, 28, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (clients, batch), generator=generator)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        base = build_model("2nn", (1, 28, 28), 10, "classification")
    shift, grads = None, {}
    for name, dtype, autocast in (("float64", torch.float64, "none"), ("fp32", torch.float32, "none"),
                                  ("bf16", torch.float32, "bf16")):  # fmt: skip
        flat = FlatModel(copy.deepcopy(base).to(dtype), "cpu", autocast)
        if shift is None:
            shift = 0.01 * torch.randn(clients, flat.dim, generator=generator, dtype=torch.float64)
        rows = (flat.x.detach().double().repeat(clients, 1) + shift).to(dtype)
        single = []
        for c in range(clients):
            flat.x.copy_(rows[c])
            flat.loss_and_grad(F.cross_entropy, inputs[c].to(dtype), labels[c])
            single.append(flat.grad.clone())
        stacked = StackedModel(flat, clients)
        stacked.x.copy_(rows)
        stacked.loss_and_grad(F.cross_entropy, inputs.to(dtype), labels)
        grads[name] = (torch.stack(single).double(), stacked.grad.double())

    def distance(a, b) -> float:
        return float((a - b).norm() / b.norm())

    exact = grads["float64"][0]
    return {name: {"one_at_a_time": distance(one, exact), "stacked": distance(stacked, exact),
                   "stacked_vs_one": distance(stacked, one)}
            for name, (one, stacked) in grads.items() if name != "float64"}  # fmt: skip


def gradient_lines(check: dict[str, dict[str, float]]) -> list[str]:
    head = ["precision", "one at a time, from float64", "stacked, from float64", "stacked, from one at a time"]
    cells = [[name, *(f"{d[k]:.2e}" for k in ("one_at_a_time", "stacked", "stacked_vs_one"))]
             for name, d in check.items()]  # fmt: skip
    return report.markdown_table(head, cells)


# --- the command ----------------------------------------------------------------------------------------------------
