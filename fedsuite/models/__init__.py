"""Built-in networks, the flat parameter view every algorithm works on, and the text models.

`fedsuite.models` was one module before this folder: its names are still handed on from `fedsuite.models.networks` for
one release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
