"""What a SuperNode runs: the ClientApp, the one NumPyClient every algorithm runs behind, what a node holds and what
its operator allows.

`fedsuite.node` was one module before this folder: its names are still handed on from `fedsuite.node.holdings` for one
release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
