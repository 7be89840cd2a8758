"""Cohort batching (batch-clients=true, docs/running/batched.md): a round's clients trained as one computation.

One job per module:
    model      `StackedModel`: the FlatModel's module evaluated functionally over a (C, d) parameter matrix, per-client
               losses and gradients from torch.func
    stacking   one stacked update rule from a group's per-client rules (their tensors stacked), or why not, and the
               stages' final tensors written back to each client's own
    loop       `train_stacked`: `fedsuite.local.train_local`'s steps for C clients at once
    grouping   which prepared clients of a round can train together (K_i, minibatch sizes, rule), and why not
    dispatch   a round's fit instructions → one FitRes per client: prepare each, train each group, finish each
    server     the in-process round loop whose fit round goes through the dispatcher
    notice     the one line where batch-clients=true is ignored (`flwr run`, deployments, secure aggregation)
"""
