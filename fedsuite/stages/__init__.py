"""Round stages: each cross-cutting mechanism of a round (the model's buffers, relaxed initialisation, privacy, the
system models, pruning, …) in one place of its own, which the round's adapters call without knowing it by name
(docs/developer/architecture.md, Round stages): `server.ServerStage` on the strategy's side, `client.ClientStage` on
the client adapter's, the client's built by `client_run.client_stages`."""
