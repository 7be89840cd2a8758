"""What a run writes: the results folder and its rows, checkpoints and their manifest, experiment tracking.

`fedsuite.results` was one module before this folder: its names are still handed on from `fedsuite.results.folder` for
one release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
