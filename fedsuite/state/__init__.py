"""Client-persistent state: the store and its tiers, its files, the run's state plan, reusable host buffers.

`fedsuite.state` was one module before this folder: its names are still handed on from `fedsuite.state.store` for one
release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
