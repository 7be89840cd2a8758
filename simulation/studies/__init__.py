"""The papers' studies, each a command on the experiment engine (docs/studies/index.md)."""
