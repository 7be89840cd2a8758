"""Lets a CUDA build of torchvision import beside a CPU build of torch, in the Docker image only.

PyPI's torchvision wheel is built against CUDA torch. Beside the CPU torch of the image its C++ operators do not
load (torchvision swallows that error), and `import torchvision` then fails when it registers fake kernels for two
of them: `RuntimeError: operator torchvision::nms does not exist`. docker/Dockerfile installs this module, with a
.pth line that imports it at interpreter start, only when `import torchvision` fails that way in the build.

Before the first `import torchvision` it declares those operators' schemas, so the rest of torchvision imports
and works (models such as resnet18-gn, transforms, datasets). The operators themselves have no kernel: calling
`torchvision.ops.nms` fails, as it would without the C++ library; fedsuite calls none of them. A CPU build of
torchvision (`PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`) loads its operators and needs none of
this (docs/deployment/docker.md#the-image)."""

from __future__ import annotations

import importlib.abc
import sys

# The operators whose fake kernels torchvision registers at import, with the schemas of its C++ library.
REGISTERED_AT_IMPORT = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_declarations = []  # the torch.library.Library objects: dropping one would remove its declarations


def declare_missing_operators() -> list[str]:
    """Declare each operator of REGISTERED_AT_IMPORT that torch does not know; returns their names."""
    import torch

    missing = [name for name in REGISTERED_AT_IMPORT if not hasattr(torch.ops.torchvision, name)]
    if missing:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for name in missing:
            library.define(REGISTERED_AT_IMPORT[name])
        _declarations.append(library)
    return missing


class DeclareBeforeTorchvision(importlib.abc.MetaPathFinder):
    """On the first `import torchvision`: declare the missing operators, then let the usual finders import it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            declare_missing_operators()
        return None


if not any(isinstance(finder, DeclareBeforeTorchvision) for finder in sys.meta_path):
    sys.meta_path.insert(0, DeclareBeforeTorchvision())
