"""Deep Leakage from Gradients: the attack, its closed form, and what each algorithm and defence reveals.

`fedsuite.dlg` was one module before this folder: its names are still handed on from `fedsuite.dlg.attack` for one
release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
