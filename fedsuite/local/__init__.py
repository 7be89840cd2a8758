"""The one local training loop every client runs, its composable update-rule pieces, and the device choice.

`fedsuite.local` was one module before this folder: its names are still handed on from `fedsuite.local.loop` for one
release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
