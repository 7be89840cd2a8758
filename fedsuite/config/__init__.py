"""A run's configuration: the run-config schema, its resolution and checks, the typed settings groups, presets, tuned
values.

`fedsuite.config` was one module before this folder: its names are still handed on from `fedsuite.config.run_config`
for one release, with a DeprecationWarning (fedsuite/moved.py)."""

from fedsuite.moved import forwarding

__getattr__ = forwarding(__name__)
