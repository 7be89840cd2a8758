"""Networks (docs/reference/protocol.md, Datasets and models) and the flat parameter view every algorithm works on.

`FlatModel` rebinds a module's parameters as views into one contiguous vector `x` (and their gradients into
one vector `grad`), so algorithm state, corrections and updates are single flat-tensor operations.
"""

from __future__ import annotations

import inspect
import math
import threading
import tomllib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedsuite.config.import_paths import ImportPathError, is_import_path, load_import_path


def _cnn(in_ch: int, hw: tuple[int, int], classes: int) -> nn.Module:
    """Small CNN sized for CPU: c5(16)-pool-c5(32)-pool-fc128-fc (≈215k params on 28×28)."""
    flat = 32 * (hw[0] // 4) * (hw[1] // 4)
    return nn.Sequential(
        nn.Conv2d(in_ch, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, classes),
    )  # fmt: skip


def _two_nn(features: int, classes: int) -> nn.Module:
    """McMahan et al.'s 2NN: 784-200-200-10 with ReLU (LoSAC's MNIST/HAR/ESR model)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(features, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, classes)
    )


def _resnet18_gn(in_ch: int, classes: int) -> nn.Module:
    """torchvision ResNet-18 topology, every BatchNorm replaced by GroupNorm(2, c)."""
    from torchvision.models import resnet18

    net = resnet18(num_classes=classes, norm_layer=lambda c: nn.GroupNorm(2, c))
    if in_ch != 3:
        net.conv1 = nn.Conv2d(in_ch, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return net


class MatrixInner(nn.Module):
    """Prediction ⟨X, D⟩ of a square matrix parameter X (zeros at start) with each flattened input D: the low-rank
    estimation model of docs/lowrank/index.md, whose X the nuclear-norm prox acts on."""

    def __init__(self, features: int):
        super().__init__()
        side = math.isqrt(features)
        if side * side != features:
            raise ValueError(f"model='matrix' needs square inputs; got {features} features")
        self.weight = nn.Parameter(torch.zeros(side, side))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.reshape(inputs.shape[0], -1) @ self.weight.reshape(-1, 1)


# Built-in models are short names of the import-path mechanism: `model='cnn'` is `model='fedsuite.models.networks:cnn'`.
BUILTIN_MODELS: dict[str, str] = {
    "cnn": "fedsuite.models.networks:cnn",
    "2nn": "fedsuite.models.networks:two_nn",
    "logreg": "fedsuite.models.networks:logreg",
    "resnet18-gn": "fedsuite.models.networks:resnet18_gn",
    "linear": "fedsuite.models.networks:linear",
    "matrix": "fedsuite.models.networks:matrix",
}


class ModelError(ValueError):
    """The model named by the run config cannot be built or does not fit the data (one line, names the key)."""


def _regression_head(input_shape: tuple[int, ...], task: str) -> nn.Module | None:
    """Synthetic federations: x ∈ R^d, one output, no bias (x* is over d weights), whatever the name."""
    return None if task == "classification" else nn.Linear(math.prod(input_shape), 1, bias=False)


def cnn(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    return _regression_head(input_shape, task) or _cnn(input_shape[0], (input_shape[1], input_shape[2]), num_classes)


def two_nn(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    return _regression_head(input_shape, task) or _two_nn(math.prod(input_shape), num_classes)


def logreg(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    features = math.prod(input_shape)
    return _regression_head(input_shape, task) or nn.Sequential(nn.Flatten(), nn.Linear(features, num_classes))


def resnet18_gn(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    return _regression_head(input_shape, task) or _resnet18_gn(input_shape[0], num_classes)


def linear(input_shape: tuple[int, ...], num_classes: int, task: str = "classification") -> nn.Module:
    head = _regression_head(input_shape, task)
    if head is None:
        raise ValueError("model='linear' is the synthetic federations' regression model; use logreg for classes")
    return head


def matrix(input_shape: tuple[int, ...], num_classes: int = 1, task: str = "regression") -> nn.Module:
    return MatrixInner(math.prod(input_shape))


def default_model(input_shape: tuple[int, ...]) -> str:
    """model='auto' for data without a default model (own datasets): the CNN for images, else the 2NN."""
    return "cnn" if len(input_shape) == 3 else "2nn"


def factory(name: str) -> Callable[..., nn.Module]:
    """The callable `name` stands for: a built-in short name or 'package.module:callable'."""
    path = BUILTIN_MODELS.get(name, name)
    if not is_import_path(path):
        allowed = ", ".join(BUILTIN_MODELS)
        raise ModelError(f"model={name!r}: allowed values are {allowed}, or 'package.module:factory'")
    try:
        target = load_import_path("model", path)
    except ImportPathError as err:
        raise ModelError(f"model={name!r}: {err.problem}") from err
    if not callable(target):
        raise ModelError(f"model={name!r}: {type(target).__name__} is not callable; name a function or class")
    return target


def parse_model_args(text: str) -> dict[str, Any]:
    """`model-args`: a TOML inline table such as '{width=64, depth=2}' ('' = none)."""
    if not text.strip():
        return {}
    try:
        return dict(tomllib.loads(f"args = {text}")["args"])
    except (tomllib.TOMLDecodeError, TypeError, ValueError) as err:
        raise ModelError(f"model-args={text!r}: not a TOML inline table such as '{{width=64}}' ({err})") from err


def _call_factory(make: Callable[..., nn.Module], offered: dict[str, Any], extra: dict[str, Any]) -> Any:
    """`make(**offered ∩ its parameters, **extra)`: a factory gets input_shape/num_classes/task only if it names
    them; one that takes **kwargs without naming them gets num_classes (the PyTorch convention: torchvision's and
    timm's builders take it that way, and would refuse the others)."""
    try:
        params = inspect.signature(make).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in offered.items() if k in params or (takes_any and k == "num_classes")}
    except (TypeError, ValueError):  # a builtin without a signature: offer nothing
        kwargs = {}
    return make(**kwargs, **extra)


def build_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str,
    model_args: dict[str, Any] | str | None = None,
) -> nn.Module:
    """The module `name` builds for this data (one path for built-in and user models); raises ModelError."""
    if name == "auto":
        name = default_model(input_shape)
    make = factory(name)
    extra = parse_model_args(model_args) if isinstance(model_args, str) else dict(model_args or {})
    offered = {"input_shape": tuple(input_shape), "num_classes": num_classes, "task": task}
    try:
        net = _call_factory(make, offered, extra)
    except ModelError:
        raise
    except Exception as err:
        raise ModelError(f"model={name!r}: the factory raised {type(err).__name__}: {err}".splitlines()[0]) from err
    if not isinstance(net, nn.Module):
        raise ModelError(f"model={name!r}: the factory returned {type(net).__name__}, not a torch.nn.Module")
    return net


_INIT_LOCK = threading.Lock()


def seeded_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str,
    seed: int,
    model_args: dict[str, Any] | str | None = None,
) -> nn.Module:
    """The module built under torch.manual_seed(seed): the same in every process (x^0, frozen parameters and
    initial buffers all come from it); the global RNG is forked, so callers' random streams are untouched."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model(name, input_shape, num_classes, task, model_args)


def trainable(module: nn.Module) -> list[nn.Parameter]:
    """The federated parameters: those with requires_grad=True, in module order (frozen ones are never sent)."""
    return [p for p in module.parameters() if p.requires_grad]


def float_buffers(module: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    """(owner, name, tensor) of every floating-point buffer (BatchNorm running statistics …); integer buffers such
    as num_batches_tracked stay with the module."""
    return [
        (owner, name, buf)
        for owner in module.modules()
        for name, buf in owner._buffers.items()
        if buf is not None and buf.is_floating_point()
    ]


def check_output(net: nn.Module, sample: torch.Tensor, num_classes: int, task: str, name: str) -> None:
    """ModelError unless `net` maps a batch of `sample` to one row of num_classes logits per sample (one output for
    regression and binary tasks)."""
    if not trainable(net):
        raise ModelError(f"model={name!r}: the model has no trainable parameter (every requires_grad is False)")
    was_training = net.training
    try:
        with torch.no_grad():
            out = net.eval()(sample)
    except Exception as err:
        raise ModelError(f"model={name!r}: a forward pass on inputs of shape {tuple(sample.shape)} raised "
                         f"{type(err).__name__}: {err}".splitlines()[0]) from err  # fmt: skip
    finally:
        net.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise ModelError(f"model={name!r}: forward returned {type(out).__name__}, not a tensor of outputs (wrap the "
                         "model so that it returns its logits)")  # fmt: skip
    n = sample.shape[0]
    fits = tuple(out.shape) == (n, num_classes) if task == "classification" else tuple(out.shape) in ((n, 1), (n,))
    if not fits:
        want = f"({n}, {num_classes})" if task == "classification" else f"({n}, 1)"
        raise ModelError(f"model={name!r}: outputs of shape {tuple(out.shape)} for {n} samples; the data needs {want} "
                         f"({task}, num_classes={num_classes})")  # fmt: skip


def start_vectors(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """(x^0, the initial buffers) of a built module: its trainable parameters and its floating-point buffers
    (BatchNorm statistics), each as one flat float32 tensor on the CPU (the buffers empty for a buffer-free model).
    The one place x^0 is taken from a model: the server's (the suite's seeded model, a user's module for
    fedsuite.app) and every client's (FedADMM's x̂_i, relaxed initialisation, buffers='local') come from here, so
    they agree bit for bit."""
    params = trainable(module)
    if not params:
        raise ModelError("the model has no trainable parameter (every requires_grad is False): nothing to federate")
    x0 = torch.cat([p.detach().reshape(-1).float().cpu() for p in params])
    owned = [b.detach().reshape(-1).float().cpu() for _, _, b in float_buffers(module)]
    return x0, torch.cat(owned) if owned else torch.zeros(0)


_STARTS: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # the latest models' start_vectors, oldest first
_STARTS_KEPT = 2
_STARTS_LOCK = threading.Lock()  # never held while taking another lock but _INIT_LOCK (seeded_model)


def seeded_start(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str,
    seed: int,
    model_args: dict[str, Any] | str | None = None,
    inspect_model: Callable[[nn.Module], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """start_vectors of the run's model built under torch.manual_seed(seed), the same in every process: made once
    per process for the latest models (a large model takes a while to build), so an in-process run's server and
    clients share one copy; read-only, callers copy what they change. `inspect_model(module)`: called on a fresh
    build first (the server's checks of the model), which it may refuse by raising."""
    key = (name, repr(model_args), tuple(input_shape), num_classes, task, seed)
    with _STARTS_LOCK:
        if key not in _STARTS or inspect_model is not None:
            net = seeded_model(name, input_shape, num_classes, task, seed, model_args)
            if inspect_model is not None:
                inspect_model(net)
            try:
                _STARTS[key] = start_vectors(net)
            except ModelError as err:
                raise ModelError(f"model={name!r}: {err}") from None
            while len(_STARTS) > _STARTS_KEPT:
                del _STARTS[next(iter(_STARTS))]
        return _STARTS[key]


def initial_vector(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    task: str,
    seed: int,
    model_args: dict[str, Any] | str | None = None,
) -> torch.Tensor:
    """x^0 of the model built under torch.manual_seed(seed) (seeded_start), a fresh copy."""
    return seeded_start(name, input_shape, num_classes, task, seed, model_args)[0].clone()


def loss_function(task: str):
    """Mean loss over a minibatch: cross-entropy, logistic, or (1/2)·squared error; the same function object on every
    call (a kept recorded step, fedsuite/batched/kept_steps.py, knows its loss by it)."""
    if task == "classification":
        return F.cross_entropy
    if task == "binary":
        return logistic_loss
    return half_squared_loss


def logistic_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(out.squeeze(-1), y)


def half_squared_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * F.mse_loss(out.squeeze(-1), y)


def loss_inputs(out: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A model's output and its targets as the loss takes them: autocast's bfloat16 (or float16) output widened to
    float32, and floating targets and output in their common dtype, so a float64 model's loss and gradients stay in
    float64 and no loss sees two float dtypes (torch 2.11's backward refuses them; later versions promote the same
    way). Class labels are left as they are."""
    if out.dtype in (torch.bfloat16, torch.float16):
        out = out.float()
    if targets.is_floating_point() and targets.dtype != out.dtype:
        common = torch.promote_types(out.dtype, targets.dtype)
        out, targets = out.to(common), targets.to(common)
    return out, targets


class FlatModel:
    """A module whose parameters are views into one flat vector `x`, gradients into one flat `grad`."""

    def __init__(
        self, module: nn.Module, device: torch.device | str = "cpu", autocast: str = "none", channels_last: bool = False
    ):
        """`autocast='bf16'`: forward pass under bfloat16 autocast (gradients and x stay float32); `channels_last`:
        4-D inputs in NHWC memory order. Both are speed options for GPUs, off by default (bf16 changes the numbers)."""
        if autocast not in ("none", "bf16"):
            raise ValueError(f"autocast={autocast!r}: allowed values are none, bf16")
        self.autocast, self.channels_last = autocast, channels_last
        self.module = module.to(device)
        params = trainable(self.module)
        if not params:
            raise ModelError("the model has no trainable parameter (every requires_grad is False): nothing to federate")
        self.x = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
        self.grad = torch.zeros_like(self.x)
        offset = 0
        for p in params:
            n = p.numel()
            p.data = self.x[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)
            offset += n
        # floating-point buffers (BatchNorm running statistics) as views into one float32 vector, outside x: they
        # are averaged beside every algorithm (buffers='average') or kept per client (buffers='local')
        owned = float_buffers(self.module)
        self.buffers = (
            torch.cat([b.detach().float().reshape(-1) for _, _, b in owned]).contiguous()
            if owned
            else (torch.zeros(0, device=self.x.device))
        )
        offset = 0
        for owner, name, buf in owned:
            n = buf.numel()
            owner._buffers[name] = self.buffers[offset : offset + n].view_as(buf)
            offset += n

    @property
    def dim(self) -> int:
        return self.x.numel()

    @property
    def device(self) -> torch.device:
        return self.x.device

    def loss_and_grad(self, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Loss at the current `x` (a detached 0-d tensor, no device sync); its gradient overwrites `grad`."""
        self.grad.zero_()
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.x.device.type, dtype=torch.bfloat16, enabled=self.autocast == "bf16"):
            out = self.module(inputs)
        loss = loss_fn(*loss_inputs(out, targets))
        loss.backward()
        return loss.detach()
