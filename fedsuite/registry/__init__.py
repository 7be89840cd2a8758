"""The algorithms the suite knows: what a registry entry is, the built-ins, plug-ins, and what each costs.

`fedsuite.registry` was one module before this folder: its names are still handed on from `fedsuite.registry.known` for
one release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
