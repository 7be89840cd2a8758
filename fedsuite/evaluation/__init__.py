"""Evaluating the broadcast model, and refusing evaluation data that no client holds.

`fedsuite.evaluation` was one module before this folder: its names are still handed on from
`fedsuite.evaluation.metrics` for one release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
