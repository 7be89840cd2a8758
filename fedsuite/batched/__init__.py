"""Cohort batching (batch-clients=true, docs/running/batched.md): a round's clients trained as one computation.

One job per module:
    model      `StackedModel`: the FlatModel's module evaluated functionally over a (C, d) parameter matrix, per-client
               losses and gradients from torch.func
    stacking   one stacked update rule from a group's per-client rules (their tensors stacked), or why not, and the
               stages' final tensors written back to each client's own
    loop       `train_stacked`: `fedsuite.local.loop.train_local`'s steps for C clients at once
    private    `StackedPrivateModel`: DP-SGD's per-record gradients inside the stacked step, each client's records
               clipped and summed at its own row, its noise from its own stream, its ledger its own
    draws      a client's whole round of minibatches drawn at once, in the one-at-a-time loop's order
    graph      a group's step recorded once as a CUDA graph and replayed (cuda-graphs)
    grouping   which prepared clients of a round can train together (K_i, minibatch sizes, rule), and why not
    chunks     how many clients one stacked computation trains (batch-chunk): even chunks, the memory measured on a
               CUDA device
    kept_steps a group's recorded step kept for the run (its tensors refilled each round), not recorded anew
    dispatch   a round's fit instructions → one reply per client: prepare each, train each group, finish each
    device_replies  in process on a CUDA card, the replies' arrays left on the device for the server
    shares     a SuperNode's share of a round as one message and one reply (under `flwr run`), packed and unpacked
    share_node a SuperNode's half of a share: its clients through the dispatcher, their replies packed
    server     the round loops: in process through the dispatcher; under `flwr run` one share message per node
    notice     where batch-clients=true still trains one client at a time (fixed mapping, secure sums, buffers),
               and the one line that says so
"""
