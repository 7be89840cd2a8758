"""The shared local loop against torch.optim.SGD, its step counting, and the batched augmentation."""

from __future__ import annotations

import torch
from torch import nn

from fedsuite.local.loop import LocalData, Prox, UpdateRule, crop_flip, minibatches, num_steps, prox_terms, train_local
from fedsuite.models.networks import FlatModel, build_model, loss_function


def small_cnn_and_data(n=40):
    torch.manual_seed(0)
    net = build_model("cnn", (1, 28, 28), 10, "classification")
    data = LocalData(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))
    return net, data


def reference_sgd(net, data, lr, wd, clip, epochs, batch, seed, mu=0.0):
    """torch.optim.SGD(weight_decay) on the same minibatches; prox added after clipping (docs/algorithms/index.md)."""
    anchor = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=lr, weight_decay=wd)
    for xb, yb in minibatches(data, epochs, 0, batch, torch.Generator().manual_seed(seed)):
        opt.zero_grad()
        nn.functional.cross_entropy(net(xb), yb).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)  # scale clip/(norm + 1e-6)
        for p, a in zip(net.parameters(), anchor, strict=True):
            p.grad.add_(p.detach() - a, alpha=mu)
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def test_loop_equals_torch_sgd_with_weight_decay_clipping_and_prox():
    net, data = small_cnn_and_data()
    ref_net, _ = small_cnn_and_data()
    model = FlatModel(net)
    x0 = model.x.clone()
    x0_before = x0.clone()
    result = train_local(
        model, x0, data, loss_function("classification"), UpdateRule(unclipped=(Prox(0.1),)),
        lr=0.05, weight_decay=1e-3, clip_norm=0.5, epochs=2, steps=0, batch_size=16,
        generator=torch.Generator().manual_seed(3),
    )  # fmt: skip
    expected = reference_sgd(ref_net, data, 0.05, 1e-3, 0.5, 2, 16, 3, mu=0.1)
    assert result.steps == 2 * 3  # 40 samples, B = 16: ceil(40/16) = 3 batches, last one partial
    torch.testing.assert_close(result.x, expected, rtol=1e-5, atol=1e-6)
    assert (result.x - x0).abs().max() > 1e-3
    assert torch.equal(x0, x0_before)  # the round's start point x^t is not modified


def test_step_counts():
    assert num_steps(500, epochs=5, steps=0, batch_size=50) == 50
    assert num_steps(100, epochs=2, steps=0, batch_size=20) == 10
    assert num_steps(101, epochs=1, steps=0, batch_size=20) == 6
    assert num_steps(37, epochs=3, steps=0, batch_size=0) == 3  # full batch
    assert num_steps(37, epochs=3, steps=5, batch_size=8) == 5  # iteration mode


def test_iteration_mode_draws_fresh_batches_each_step():
    data = LocalData(torch.arange(30.0).view(30, 1), torch.arange(30))
    batches = [y.tolist() for _, y in minibatches(data, 1, 4, 10, torch.Generator().manual_seed(0))]
    assert len(batches) == 4 and all(len(set(b)) == 10 for b in batches)
    assert len({tuple(sorted(b)) for b in batches}) == 4


def test_crop_flip_picks_a_window_of_the_padded_image_and_flips_some():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8).repeat(8, 1, 1, 1)
    out = crop_flip(x, 2, torch.Generator().manual_seed(1))
    assert out.shape == x.shape
    padded = nn.functional.pad(x, (2, 2, 2, 2))
    flipped = 0
    for i in range(len(x)):
        windows = [padded[i, :, dy : dy + 8, dx : dx + 8] for dy in range(5) for dx in range(5)]
        plain = any(torch.equal(out[i], w) for w in windows)
        mirrored = any(torch.equal(out[i], w.flip(-1)) for w in windows)
        assert plain or mirrored
        flipped += mirrored and not plain
    assert 0 < flipped < len(x)


def test_flat_model_gradient_matches_autograd():
    net, data = small_cnn_and_data(8)
    model = FlatModel(net)
    model.loss_and_grad(loss_function("classification"), data.inputs, data.targets)
    ref_net, _ = small_cnn_and_data(8)
    nn.functional.cross_entropy(ref_net(data.inputs), data.targets).backward()
    torch.testing.assert_close(model.grad, torch.cat([p.grad.reshape(-1) for p in ref_net.parameters()]))


def test_step_after_step_proximal_and_batch_source_stages():
    """The stages the adaptive and variance-reduced families plug into: a step that doubles the move equals SGD
    at twice the lr; after-step corrections add to the move unscaled by the step; a proximal op sees the moved x;
    a batch source's block index reaches the transforms."""
    net, data = small_cnn_and_data()
    model = FlatModel(net)
    x0 = model.x.clone()
    kw = dict(weight_decay=0.0, clip_norm=0.0, epochs=1, steps=3, batch_size=10)

    def run(rule, lr):
        return train_local(model, x0, data, loss_function("classification"), rule, lr=lr,
                           generator=torch.Generator().manual_seed(1), **kw).x.clone()  # fmt: skip

    plain = run(UpdateRule(), 0.2)
    doubled = run(UpdateRule(step=lambda d, ctx: d.mul_(2.0)), 0.1)
    torch.testing.assert_close(doubled, plain, rtol=0, atol=1e-6)

    shift = torch.full_like(x0, 0.5)
    shifted = run(UpdateRule(after_step=(lambda u, ctx: u.add_(shift),)), 0.1)
    base = run(UpdateRule(), 0.1)
    assert not torch.allclose(shifted, base)  # the shift changes later gradients too; first step checked below
    kw["steps"] = 1
    first = run(UpdateRule(after_step=(lambda u, ctx: u.add_(shift),)), 0.1)
    torch.testing.assert_close(first, run(UpdateRule(), 0.1) - 0.05, rtol=0, atol=1e-6)
    kw["steps"] = 3

    seen = []
    zeroed = run(UpdateRule(proximal=(lambda x, lr, ctx: seen.append(lr) or x.zero_(),)), 0.1)
    assert seen == [0.1] * 3 and bool((zeroed == 0).all())

    def two_blocks(data, epochs, steps, batch_size, generator):
        for k in range(steps):
            j = k % 2
            yield data.inputs[j * 20 : (j + 1) * 20], data.targets[j * 20 : (j + 1) * 20], j

    blocks = []
    run(UpdateRule(batches=two_blocks, clipped=(lambda d, ctx: blocks.append(ctx.block),)), 0.1)
    assert blocks == [0, 1, 0]


def test_local_benchmark_short_run_prints_seconds_per_round_last(capsys, tmp_path):
    from simulation.benchmarks import local_loop as local_benchmark

    local_benchmark.main(["--model", "cnn", "--clients", "2", "--steps", "2", "--rounds", "1", "--samples", "60",
                          "--device", "cpu", "--json", str(tmp_path / "b.json")])  # fmt: skip
    name, value = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert name == "seconds_per_round" and float(value) > 0


def test_reference_clip_scope_clips_the_centre_half_of_the_prox():
    """clip-scope='reference' (FL-Simulator/FedDyn code, docs/algorithms/index.md): x ← x − η(clip(g − μ·x^t) + μ·x +
    wd·x), against a hand-written loop; 'clean' clips g alone and differs once clipping is active."""
    net, data = small_cnn_and_data()
    model = FlatModel(net)
    x0 = model.x.clone()
    loss = loss_function("classification")
    mu, lr, wd, clip = 0.5, 0.05, 1e-3, 0.5
    kw = dict(weight_decay=wd, epochs=1, steps=3, batch_size=10)

    def run(scope, clip_norm=clip):
        clipped, unclipped = prox_terms(mu, clip_scope=scope)
        return train_local(model, x0, data, loss, UpdateRule(clipped=clipped, unclipped=unclipped), lr=lr,
                           clip_norm=clip_norm, generator=torch.Generator().manual_seed(2), **kw).x.clone()  # fmt: skip

    x = x0.clone()
    for inputs, targets in minibatches(data, 1, 3, 10, torch.Generator().manual_seed(2)):
        model.x.copy_(x)
        model.loss_and_grad(loss, inputs, targets)
        d = model.grad.clone() - mu * x0
        d = d * torch.clamp(clip / (d.norm() + 1e-6), max=1.0)
        x = x - lr * (d + mu * x + wd * x)
    reference = run("reference")
    torch.testing.assert_close(reference, x, rtol=0, atol=1e-6)
    assert (run("clean") - reference).abs().max() > 1e-4
    torch.testing.assert_close(run("clean", 0.0), run("reference", 0.0), rtol=0, atol=0)
