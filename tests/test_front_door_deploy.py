"""The deployment and Docker front door, without a Docker engine: `docker/demo` against stand-in `docker`,
`docker-compose` and `flwr` commands (its checks before `up`, which compose command it picks, the base image it
remembers, the `flwr` of FEDSUITE_VENV), what `.dockerignore` lets into the build context, one Flower version for
the project and the image, `deploy/make-certs` and git, and the README's deploy, Docker and `flwr run` lines."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import flwr
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.test_compose_flags import compose_command

PROJECT = Path(__file__).resolve().parent.parent
DOCKER = PROJECT / "docker"
PINNED = dict(
    re.findall(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)", (DOCKER / "requirements.txt").read_text(), flags=re.MULTILINE)
)

# ---- one Flower version ---------------------------------------------------------------------------------------------


def test_the_image_pins_the_flower_version_installed_here():
    """CI installs the project from scratch: when pip moves to another flwr, the image's pin must follow."""
    assert PINNED["flwr"] == flwr.__version__, (
        f"docker/requirements.txt pins flwr=={PINNED['flwr']} but pip installed {flwr.__version__} for the project: "
        "pin that version in docker/requirements.txt, Dockerfile, compose.yml and the docs"
    )
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE=flwr/superexec:{flwr.__version__}\n" in dockerfile
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]
    assert compose["superlink"]["image"] == f"fedsuite-flwr:${{FEDSUITE_TAG:-{flwr.__version__}}}"
    assert compose["superlink"]["build"]["args"]["BASE_IMAGE"] == f"${{BASE_IMAGE:-flwr/superexec:{flwr.__version__}}}"
    pyproject = (PROJECT / "pyproject.toml").read_text()
    (spec,) = re.findall(r'"flwr\[simulation\]([^"]*)"', pyproject)
    assert flwr.__version__ in SpecifierSet(spec)


def test_the_docs_name_the_flower_version_installed_here():
    """Every `Flower 1.x`, `flwr 1.x`, `flwr==1.x`, `flwr/superexec:1.x` or `fedsuite-flwr:1.x` in the deployment
    docs, the Docker files, the README and Getting started names the installed major.minor."""
    minor = ".".join(flwr.__version__.split(".")[:2])
    mention = re.compile(r"(?:Flower|flwr)(?:==| |/superexec:|-flwr:)(\d+\.\d+)(?:\.\d+)?")
    files = [PROJECT / "README.md", PROJECT / "docs" / "getting-started.md", PROJECT / "docs" / "running" / "run.md"]
    files += sorted((PROJECT / "docs" / "deployment").glob("*.md")) + sorted(p for p in DOCKER.iterdir() if p.is_file())
    stale = [
        f"{path.relative_to(PROJECT)}: {m.group(0)}"
        for path in files
        for m in mention.finditer(path.read_text(errors="replace"))
        if m.group(1) != minor
    ]
    assert not stale, stale


# ---- the build context ----------------------------------------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """(.dockerignore's lines as Docker reads them: (is an exception `!…`, the pattern as a regex)."""
    out = []
    for line in (PROJECT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = "".join(
            ".*" if part == "**" else "[^/]*" if part == "*" else "[^/]" if part == "?" else re.escape(part)
            for part in re.split(r"(\*\*|\*|\?)", pattern)
        )
        out.append((negate, re.compile(regex)))
    return out


def sent_to_the_engine(path: str, patterns: list[tuple[bool, re.Pattern]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent folders decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, regex in patterns:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negate
    return not excluded


def test_the_build_context_holds_only_what_the_image_needs():
    """compose.yml builds with the project folder as context; .dockerignore must keep the virtual environment, the
    keys, results, the studies' data and .git on the host and still send what the Dockerfile COPYs."""
    build = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]["superlink"]["build"]
    assert (DOCKER / build["context"]).resolve() == PROJECT and (PROJECT / ".dockerignore").is_file()
    patterns = dockerignore_patterns()
    copied = re.findall(r"^COPY\s+(?!--from)(.+?)\s+\S+$", (DOCKER / "Dockerfile").read_text(), flags=re.MULTILINE)
    needed = [p.rstrip("/") for line in copied for p in line.split()]
    assert needed == ["docker/requirements.txt", "docker/torchvision_cpu_ops.py", "docker/wheels"]
    for path in (*needed, "docker/Dockerfile", "docker/wheels/flwr-1.42.0-py3-none-any.whl",
                 "docker/wheels/pip-cert-123.pem"):  # fmt: skip
        assert sent_to_the_engine(path, patterns), path
    kept_home = [".venv/bin/python", ".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so", ".git/HEAD",
                 ".git/objects/ab/cdef", "certs/ca.key", "certs/supernodes/node0", "docker/certs/ca.key",
                 "docker/certs/superlink.key", "docker/certs/supernodes/supernode-1", "results/run/summary.json",
                 "docker/results/demo-1/summary.json", "docker/.flwr-home/config.toml", "docker/node-data",
                 "docker/base-image", "state/superlink.db", "site/index.html"]  # fmt: skip
    assert not [p for p in kept_home if sent_to_the_engine(p, patterns)]
    tracked = subprocess.run(["git", "ls-files"], cwd=PROJECT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    assert any(p.startswith("docs/cpu-study/") for p in tracked)  # the committed studies' data
    sent = {p for p in tracked if sent_to_the_engine(p, patterns)}
    assert sent <= {"docker/Dockerfile", "docker/requirements.txt", "docker/torchvision_cpu_ops.py",
                    "docker/wheels/.gitkeep"}, sorted(sent)[:20]  # fmt: skip


def test_compose_passes_every_build_argument_of_the_dockerfile():
    """The Dockerfile's ARGs (PIP_CERT among them) all reach the build from compose.yml."""
    args = set(re.findall(r"^ARG\s+(\w+)", (DOCKER / "Dockerfile").read_text(), flags=re.MULTILINE))
    build = yaml.safe_load((DOCKER / "compose.yml").read_text())["services"]["superlink"]["build"]
    assert args == set(build["args"]) and "PIP_CERT" in args


# ---- what the image runs -------------------------------------------------------------------------------------------


def image_distributions() -> set[str]:
    """The distributions docker/requirements.txt installs."""
    lines = [line.split("#")[0].strip() for line in (DOCKER / "requirements.txt").read_text().splitlines()]
    return {canonicalize_name(Requirement(line).name) for line in lines if line}


# Records the top-level modules that the built-in models' own modules import (at their import, or lazily when a
# factory runs), then builds every built-in model.
IMPORTS_OF_THE_BUILTIN_MODELS = """
import importlib.abc, json, sys
modules, imported = {"fedsuite.models.networks"}, set()
class Recorder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        if frame is not None and frame.f_globals.get("__name__") in modules:
            imported.add(name.split(".")[0])
sys.meta_path.insert(0, Recorder())
from fedsuite.models.networks import BUILTIN_MODELS, factory
modules |= {path.partition(":")[0] for path in BUILTIN_MODELS.values()}
for name in BUILTIN_MODELS:
    regression = name in ("linear", "matrix")
    shape = (16,) if name == "matrix" else (3, 32, 32)
    factory(name)(shape, 1 if regression else 10, "regression" if regression else "classification")
print(json.dumps(sorted(imported - set(sys.stdlib_module_names) - {"fedsuite"})))
"""


def test_the_image_installs_what_every_builtin_model_imports():
    """Every package the built-in models' modules import (torch; torchvision for resnet18-gn) is one that
    docker/requirements.txt installs, so the image runs every built-in model."""
    res = subprocess.run([sys.executable, "-c", IMPORTS_OF_THE_BUILTIN_MODELS], cwd=PROJECT, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    owners = importlib.metadata.packages_distributions()
    needed = {canonicalize_name(d) for m in json.loads(res.stdout) for d in owners.get(m, [m])}
    assert {"torch", "torchvision"} <= needed, needed
    assert needed <= image_distributions(), f"docker/requirements.txt lacks {sorted(needed - image_distributions())}"


FAKE_TORCHVISION = """import torch


@torch.library.register_fake("torchvision::nms")  # what torchvision does at import, its C++ operators unloaded
def nms(dets, scores, iou_threshold):
    return dets.new_empty(0, dtype=torch.long)
"""


def test_torchvision_cpu_ops_lets_torchvision_import_without_its_operators(tmp_path):
    """A stand-in torchvision that registers a fake kernel for torchvision::nms, as torchvision does, with its C++
    operators unloaded (a CUDA build beside a CPU torch): its import fails alone and works after the image's
    docker/torchvision_cpu_ops.py (which the .pth line of the image imports at interpreter start)."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(FAKE_TORCHVISION)
    probe = "import torchvision, torch; print(torch.ops.torchvision.nms.default._schema)"

    def python(code: str, *path: Path) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)

    alone = python(probe, tmp_path)
    assert alone.returncode != 0 and "torchvision::nms does not exist" in alone.stderr
    shimmed = python("import torchvision_cpu_ops; " + probe, tmp_path, DOCKER)
    assert shimmed.returncode == 0, shimmed.stderr[-3000:]
    assert "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor" in shimmed.stdout


# ---- stand-ins for docker, docker-compose and flwr ------------------------------------------------------------------

COMPOSE_PART = r"""
log() { echo "$*" >>"$FAKE_STATE/calls"; }
image_file() { echo "$FAKE_STATE/image-$(echo "$1" | tr '/:' '__')"; }
fake_compose() {
    [ "${1:-}" = version ] && { echo "Docker Compose version fake"; exit 0; }
    log "$COMPOSE_NAME $* | BASE_IMAGE=${BASE_IMAGE:-} FEDSUITE_BUILD_PIP_CERT=${FEDSUITE_BUILD_PIP_CERT:-}" \
        "FEDSUITE_UID=$FEDSUITE_UID FEDSUITE_GID=$FEDSUITE_GID"
    for a in "$@"; do
        [ "$a" = build ] || continue
        touch "$(image_file "fedsuite-flwr:$FEDSUITE_TAG")"
        cert="$FAKE_CONTEXT/docker/wheels/${FEDSUITE_BUILD_PIP_CERT#/tmp/fedsuite-build/}"
        [ -z "${FEDSUITE_BUILD_PIP_CERT:-}" ] || [ -f "$cert" ] || log "the build found no $cert"
    done
    exit 0
}
"""
FAKE_DOCKER = (
    "#!/usr/bin/env bash\n"
    + COMPOSE_PART
    + r"""
case "${1:-}" in
compose)
    [ -f "$FAKE_STATE/plugin" ] || { echo "unknown shorthand flag: 'f' in -f" >&2; exit 125; }
    shift; COMPOSE_NAME="docker compose"; fake_compose "$@" ;;
info) [ ! -f "$FAKE_STATE/no-engine" ] ;;
image) [ -f "$(image_file "$3")" ] ;;
pull) log "docker $*"; [ -f "$FAKE_STATE/registry" ] && touch "$(image_file "${@: -1}")" ;;
*) exit 0 ;;
esac
"""
)
FAKE_DOCKER_COMPOSE = "#!/usr/bin/env bash\n" + COMPOSE_PART + 'COMPOSE_NAME=docker-compose; fake_compose "$@"\n'
# `id` as a user FAKE_UID (default 1000) and a `chown` that only records its calls.
FAKE_ID = """#!/usr/bin/env bash
case "${1:-}" in -u) echo "${FAKE_UID:-1000}" ;; -g) echo "${FAKE_UID:-1000}" ;; *) echo "uid=${FAKE_UID:-1000}" ;; esac
"""
FAKE_CHOWN = '#!/usr/bin/env bash\necho "chown $*" >>"$FAKE_STATE/calls"\n'
FAKE_FLWR = r"""#!/usr/bin/env bash
echo "flwr $*" >>"$FAKE_STATE/calls"
case "$1 ${2:-}" in
"config ls") mkdir -p "$FLWR_HOME"; touch "$FLWR_HOME/config.toml" ;;
"supernode register") echo "SuperNode registered successfully. SuperNode 1" ;;
"supernode ls") [[ " $* " != *" --format json "* ]] || printf '"status": "online"\n"status": "online"\n' ;;
esac
"""
# What docker/demo and the deploy/ scripts call besides docker and flwr (a PATH without the machine's own Docker).
SHELL_TOOLS = "bash env sed grep awk cat head tee tr wc ls cp mv rm mkdir mktemp chmod touch dirname basename"
TOOLS = [*SHELL_TOOLS.split(), "seq", "sleep", "date", "openssl", "ssh-keygen"]


def seed_credentials(folder: Path) -> None:
    """Stand-ins for the CA and the SuperLink certificate, which deploy/make-certs keeps when they exist (it then
    spends no time on RSA keys; the SuperNodes' key pairs are still made)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("ca.crt", "ca.key", "superlink.crt", "superlink.key"):
        (folder / name).write_text("stand-in\n")


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


class Sandbox:
    """A copy of docker/ and deploy/, a PATH of plain tools plus the stand-ins chosen, a venv holding a stand-in flwr
    (named by FEDSUITE_VENV, not on PATH), and the stand-ins' state folder (calls, images that exist)."""

    def __init__(self, root: Path, *, docker: bool = True, plugin: bool = False, compose_v1: bool = False):
        self.root = root
        self.project = root / "project"
        left_out = shutil.ignore_patterns("wheels", "certs", "results", ".flwr-home", "base-image", "node-data")
        for folder in ("docker", "deploy"):
            shutil.copytree(PROJECT / folder, self.project / folder, ignore=left_out)
        (self.project / "docker" / "wheels").mkdir()
        self.state = root / "state"
        self.state.mkdir()
        if plugin:
            (self.state / "plugin").touch()
        self.bin = root / "bin"
        self.bin.mkdir()
        for tool in TOOLS:
            found = shutil.which(tool)
            if found:
                (self.bin / tool).symlink_to(found)
        executable(self.bin / "id", FAKE_ID)
        executable(self.bin / "chown", FAKE_CHOWN)
        if docker:
            executable(self.bin / "docker", FAKE_DOCKER)
        if compose_v1:
            executable(self.bin / "docker-compose", FAKE_DOCKER_COMPOSE)
        self.venv = root / "venv"
        executable(self.venv / "bin" / "flwr", FAKE_FLWR)
        self.data = root / "fashion-mnist"
        self.data.mkdir()
        self.demo_dir = root / "demo"
        seed_credentials(self.demo_dir / "certs")

    def wheels(self, pins: dict[str, str]) -> None:
        for name, version in pins.items():
            (self.project / "docker" / "wheels" / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").touch()

    def image(self, name: str) -> None:
        (self.state / ("image-" + name.replace("/", "_").replace(":", "_"))).touch()

    def has_image(self, name: str) -> bool:
        return (self.state / ("image-" + name.replace("/", "_").replace(":", "_"))).exists()

    def calls(self) -> list[str]:
        path = self.state / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def demo(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        base = {"PATH": str(self.bin), "HOME": str(self.root), "FAKE_STATE": str(self.state),
                "DEMO_DIR": str(self.demo_dir), "FEDSUITE_DATA": str(self.data),
                "FEDSUITE_VENV": str(self.venv), "FAKE_CONTEXT": str(self.project)}  # fmt: skip
        return subprocess.run([str(self.project / "docker" / "demo"), *args], capture_output=True, text=True,
                              env={**base, **env}, timeout=120)  # fmt: skip


def one_error_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.stdout, res.stderr)
    return lines[0]


def test_compose_is_found_by_its_version_command(tmp_path, monkeypatch):
    """A docker CLI without the compose plugin (`docker compose -f …` → unknown shorthand flag) is no compose, so the
    tests that need compose skip; a docker-compose v1 binary is; the plugin wins when both work."""
    without = Sandbox(tmp_path / "a")
    monkeypatch.setenv("FAKE_STATE", str(without.state))
    assert compose_command(str(without.bin)) is None
    v1 = Sandbox(tmp_path / "b", compose_v1=True)
    monkeypatch.setenv("FAKE_STATE", str(v1.state))
    assert compose_command(str(v1.bin)) == [str(v1.bin / "docker-compose")]
    both = Sandbox(tmp_path / "c", plugin=True, compose_v1=True)
    monkeypatch.setenv("FAKE_STATE", str(both.state))
    assert compose_command(str(both.bin)) == [str(both.bin / "docker"), "compose"]


def test_demo_up_without_compose_says_so_before_it_writes_anything(tmp_path):
    box = Sandbox(tmp_path)
    box.wheels(PINNED)
    line = one_error_line(box.demo("up", BASE_IMAGE="base:local"))
    assert "Docker Compose is missing" in line and "docker-compose" in line and "docker compose version" in line
    assert not (box.demo_dir / "certs" / "supernodes").exists() and not box.calls()
    assert "no docker command" in one_error_line(Sandbox(tmp_path / "none", docker=False).demo("up"))


def test_demo_up_names_each_missing_prerequisite_before_it_writes_anything(tmp_path):
    box = Sandbox(tmp_path, compose_v1=True)
    assert "docker/fetch-wheels" in one_error_line(box.demo("up", BASE_IMAGE="base:local"))
    box.wheels({**PINNED, "flwr": "1.0.0"})  # wheels of another flwr than the pinned one
    line = one_error_line(box.demo("up", BASE_IMAGE="base:local"))
    assert f"flwr=={PINNED['flwr']}" in line and "docker/fetch-wheels" in line
    box.wheels(PINNED)
    line = one_error_line(box.demo("up", BASE_IMAGE="base:local"))  # neither here nor pullable
    assert "base:local" in line and "BASE_IMAGE=" in line
    line = one_error_line(box.demo("up"))  # the default base
    assert f"flwr/superexec:{PINNED['flwr']}" in line and "BASE_IMAGE=" in line
    box.image("base:local")
    (box.state / "no-engine").touch()
    assert "docker info" in one_error_line(box.demo("up", BASE_IMAGE="base:local"))
    (box.state / "no-engine").unlink()
    line = one_error_line(box.demo("up", BASE_IMAGE="base:local", FEDSUITE_DATA=str(tmp_path / "nowhere")))
    assert "dataset-fashion-mnist" in line and "FEDSUITE_DATA" in line
    line = one_error_line(box.demo("up", BASE_IMAGE="base:local", FEDSUITE_VENV=str(tmp_path / "novenv")))
    assert "flwr not found" in line and "FEDSUITE_VENV" in line
    assert not (box.demo_dir / "certs" / "supernodes").exists()
    assert [c for c in box.calls() if not c.startswith("docker pull")] == []


def test_demo_up_builds_once_and_remembers_its_base_image(tmp_path):
    """docker-compose v1 only, the venv not active: the first `up` builds on the BASE_IMAGE given; the next `up`
    needs none (the image exists); after the image is gone, `up` rebuilds on the remembered base. Every flwr call
    is FEDSUITE_VENV's. A PIP_CERT in the environment stays out of a build from wheels (it needs no index)."""
    box = Sandbox(tmp_path, compose_v1=True)
    box.wheels(PINNED)
    box.image("base:local")
    cert = tmp_path / "ca-bundle.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    first = box.demo("up", BASE_IMAGE="base:local", PIP_CERT=str(cert))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 SuperNodes online" in first.stdout
    (build,) = [c for c in box.calls() if c.startswith("docker-compose ") and " build " in c + " "]
    assert "BASE_IMAGE=base:local" in build and "FEDSUITE_BUILD_PIP_CERT= " in build
    assert not list((box.project / "docker" / "wheels").glob("*.pem"))
    assert box.has_image(f"fedsuite-flwr:{PINNED['flwr']}")
    flwr_calls = [c for c in box.calls() if c.startswith("flwr ")]
    assert {"flwr config ls --format json", "flwr supernode ls fedsuite-docker --format json"} <= set(flwr_calls)
    assert any(c.startswith("flwr supernode register ") for c in flwr_calls)
    assert (box.demo_dir / "certs" / "supernodes" / "supernode-2").exists()

    (box.state / "calls").unlink()
    again = box.demo("up")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "built before" in again.stdout and not [c for c in box.calls() if " build" in c]

    (box.state / "calls").unlink()
    (box.state / f"image-fedsuite-flwr_{PINNED['flwr']}").unlink()
    rebuilt = box.demo("up")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    (build,) = [c for c in box.calls() if c.startswith("docker-compose ") and " build " in c + " "]
    assert "BASE_IMAGE=base:local" in build
    assert not [c for c in box.calls() if c.startswith("docker pull")]


def test_demo_prefers_the_compose_plugin(tmp_path):
    box = Sandbox(tmp_path, plugin=True, compose_v1=True)
    box.wheels(PINNED)
    box.image("base:local")
    res = box.demo("up", BASE_IMAGE="base:local")
    assert res.returncode == 0, res.stdout + res.stderr
    compose_calls = [c.split(" | ")[0] for c in box.calls() if c.startswith(("docker compose", "docker-compose"))]
    assert compose_calls and all(c.startswith("docker compose -f ") for c in compose_calls)
    down = box.demo("down")
    assert down.returncode == 0 and box.calls()[-1].startswith("docker compose -f ") and " down " in box.calls()[-1]


def test_demo_gives_pip_cert_to_an_index_build_for_the_build_only(tmp_path):
    """Without wheels, a PIP_CERT reaches the build as a file of the context while the build runs and is gone after
    it, whether the build succeeds or fails; an existing file of the user's in docker/wheels/ is left alone."""
    box = Sandbox(tmp_path, compose_v1=True)
    box.image("base:local")
    cert = tmp_path / "ca-bundle.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    own = box.project / "docker" / "wheels" / "pip-cert.pem"
    own.write_text("the user's own file\n")
    res = box.demo("up", BASE_IMAGE="base:local", PIP_CERT=str(cert), PIP_EXTRA_INDEX_URL="https://example.invalid")
    assert res.returncode == 0, res.stdout + res.stderr
    (build,) = [c for c in box.calls() if c.startswith("docker-compose ") and " build " in c + " "]
    assert re.search(r"FEDSUITE_BUILD_PIP_CERT=/tmp/fedsuite-build/pip-cert-\d+\.pem ", build), build
    assert not [c for c in box.calls() if c.startswith("the build found no")], box.calls()
    assert sorted(p.name for p in own.parent.iterdir()) == ["pip-cert.pem"]
    assert own.read_text() == "the user's own file\n"
    failing = Sandbox(tmp_path / "failing", compose_v1=True)
    failing.image("base:local")
    build_fails = '[[ " $* " == *" build "* ]] && exit 1\nfake_compose "$@"'
    executable(failing.bin / "docker-compose", FAKE_DOCKER_COMPOSE.replace('fake_compose "$@"', build_fails))
    res = failing.demo("up", BASE_IMAGE="base:local", PIP_CERT=str(cert), PIP_EXTRA_INDEX_URL="https://example.invalid")
    assert res.returncode == 1 and "building fedsuite-flwr" in res.stderr
    assert not list((failing.project / "docker" / "wheels").glob("*.pem"))


def test_demo_never_runs_the_containers_as_root(tmp_path):
    """Run by root, the containers run as the image's user app (uid 49999), who gets the private keys they read and
    the results folder; a user's own uid is kept, and nothing is chowned for them."""
    box = Sandbox(tmp_path, compose_v1=True)
    box.wheels(PINNED)
    box.image("base:local")
    res = box.demo("up", BASE_IMAGE="base:local", FAKE_UID="0")
    assert res.returncode == 0, res.stdout + res.stderr
    started = [c for c in box.calls() if c.startswith("docker-compose ") and " up " in c]
    assert started and all("FEDSUITE_UID=49999 FEDSUITE_GID=49999" in c for c in started)
    (chown,) = [c.split() for c in box.calls() if c.startswith("chown ")]
    certs = box.demo_dir / "certs"
    assert chown[1] == "49999:49999" and sorted(chown[2:]) == sorted(
        str(p) for p in (certs / "superlink.key", certs / "supernodes" / "supernode-1",
                         certs / "supernodes" / "supernode-2", box.demo_dir / "results"))  # fmt: skip

    user = Sandbox(tmp_path / "user", compose_v1=True)
    user.wheels(PINNED)
    user.image("base:local")
    assert user.demo("up", BASE_IMAGE="base:local", FAKE_UID="1234").returncode == 0
    started = [c for c in user.calls() if c.startswith("docker-compose ") and " up " in c]
    assert started and all("FEDSUITE_UID=1234 FEDSUITE_GID=1234" in c for c in started)
    assert not [c for c in user.calls() if c.startswith("chown ")]


def test_demo_down_without_an_engine_says_so_in_one_line(tmp_path):
    box = Sandbox(tmp_path, compose_v1=True)
    (box.state / "no-engine").touch()
    line = one_error_line(box.demo("down"))
    assert "docker info" in line and "docker.io" in line and "dockerd" in line
    assert not [c for c in box.calls() if c.startswith("docker-compose")]


def test_the_image_keeps_neither_wheels_nor_root(tmp_path):
    """The wheels (and a CA bundle beside them) are copied into a build stage of their own; the image's stage takes
    only the virtual environment from it, and its last USER is not root."""
    stages = re.split(r"^FROM\s", (DOCKER / "Dockerfile").read_text(), flags=re.MULTILINE)[1:]
    assert len(stages) >= 2, "one stage: the wheels' COPY layer stays in the image"
    final = stages[-1]
    copies = re.findall(r"^COPY\s+(.+)$", final, flags=re.MULTILINE)
    assert copies and all(c.startswith("--from=") for c in copies), copies
    assert "docker/wheels" in "".join(stages[:-1])
    users = re.findall(r"^USER\s+(\S+)", final, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")


# ---- credentials and git --------------------------------------------------------------------------------------------


def test_make_certs_warns_when_its_keys_could_be_committed(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    def make(out: Path) -> str:
        seed_credentials(out)
        res = subprocess.run([str(PROJECT / "deploy" / "make-certs"), "--out", str(out), "node0"], cwd=repo,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stderr

    assert "not git-ignored" in make(repo / "keys")
    (repo / ".gitignore").write_text("keys/\n")
    assert "WARNING" not in make(repo / "keys")
    assert "WARNING" not in make(tmp_path / "outside")
    if shutil.which("git") and (PROJECT / ".git").exists():  # the project's own certs/ and docker/certs/
        for path in ("certs/ca.key", "certs/supernodes/node0", "docker/certs/superlink.key"):
            assert subprocess.run(["git", "check-ignore", "-q", path], cwd=PROJECT).returncode == 0, path


# ---- deploy/ scripts on one machine, without a deployment ------------------------------------------------------------


def deploy_env(home: Path) -> dict[str, str]:
    """The deploy/ scripts with this interpreter's Flower executables and a FLWR_HOME of the test's own."""
    return {**os.environ, "FEDSUITE_VENV": str(Path(sys.executable).parent.parent), "FLWR_HOME": str(home)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_superlink_creates_the_folder_of_its_database(tmp_path):
    """`deploy/superlink --database state/superlink.db`, as the README types it, in a folder without state/: the
    SuperLink starts (Flower alone dies with an sqlite traceback) and writes its database there."""
    log = tmp_path / "superlink.log"
    cmd = [str(PROJECT / "deploy" / "superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(free_port()),
           "--database", "state/superlink.db"]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=deploy_env(tmp_path / "home"), stdout=out, stderr=out,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "Uvicorn running" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, log.read_text()[-3000:]
        assert (tmp_path / "state" / "superlink.db").is_file(), log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert "Traceback" not in log.read_text()


def test_superlink_refuses_a_database_it_cannot_place_in_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-folder").mkdir()
    for database, words in (("a-file/superlink.db", "cannot create its folder"), ("a-folder", "is a folder")):
        res = subprocess.run([str(PROJECT / "deploy" / "superlink"), "--insecure", "--database", database],
                             cwd=tmp_path, env=deploy_env(tmp_path / "home"), capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        line = one_error_line(res)
        assert "--database" in line and words in line and database in line


def connect(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROJECT / "deploy" / "connect"), *args], env=deploy_env(home), capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def connections(home: Path) -> dict:
    out = subprocess.run([str(Path(sys.executable).parent / "flwr"), "config", "ls", "--format", "json"],
                         env=deploy_env(home), capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    return json.loads(out)


def test_connect_keeps_an_existing_connection_unless_told_to_replace_it(tmp_path):
    """Flower's default `local` connection (the one a plain `flwr run .` simulates on) survives
    `deploy/connect local …`; a second `deploy/connect mylink` is refused until --replace, which leaves one table."""
    home = tmp_path / "home"
    line = one_error_line(connect(home, "local", "127.0.0.1:9093", "--insecure"))
    assert "'local'" in line and "--replace" in line and "flwr run ." in line
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["superlink"]["local"]["address"] == ":local:" and config["superlink"]["default"] == "local"
    assert connect(home, "mylink", "127.0.0.1:9093", "--insecure").returncode == 0
    line = one_error_line(connect(home, "mylink", "127.0.0.1:9094", "--insecure"))
    assert "'mylink'" in line and "--replace" in line
    assert tomllib.loads((home / "config.toml").read_text())["superlink"]["mylink"]["address"] == "127.0.0.1:9093"
    replaced = connect(home, "mylink", "127.0.0.1:9094", "--insecure", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    text = (home / "config.toml").read_text()
    assert text.count("[superlink.mylink]") == 1 and tomllib.loads(text)["superlink"]["mylink"] == {
        "address": "127.0.0.1:9094", "insecure": True}  # fmt: skip
    assert connections(home) == {"superlink": ["supergrid", "local", "mylink"], "default": "local"}


def test_make_certs_and_the_deployment_page_keep_ca_key_in_the_same_place():
    """ca.key stays on the machine that made the credentials (no daemon reads it); superlink.key goes to the
    SuperLink host: the script's help and the deployment page's table say the same."""
    help_text = subprocess.run([str(PROJECT / "deploy" / "make-certs"), "--help"], capture_output=True, text=True,
                               timeout=60).stdout  # fmt: skip
    sentences = re.split(r"(?<=[.;])\s", " ".join(help_text.split()))
    (ca_key,) = [s for s in sentences if "ca.key stays" in s]
    assert "trusted machine" in ca_key and "no daemon" in ca_key and "SuperLink host" not in ca_key
    assert any("superlink.key goes to the SuperLink host only" in s for s in sentences)
    page = (PROJECT / "docs" / "deployment" / "index.md").read_text()
    (row,) = [line for line in page.splitlines() if line.startswith("| `ca.key` |")]
    assert row.rstrip(" |").endswith("stays on the trusted machine that ran `deploy/make-certs`")
    (row,) = [line for line in page.splitlines() if line.startswith("| `superlink.crt`, `superlink.key` |")]
    assert row.rstrip(" |").endswith("SuperLink host only")
    assert "needs `ca.crt`,\n`superlink.crt` and `superlink.key` there, and not `ca.key`" in page


def test_the_docs_sections_the_scripts_point_to_exist():
    """Every docs/deployment/<page>#<section> that a deploy/ or docker/ script names (in its help or its errors)
    is a heading of that page, as MkDocs makes anchors of headings."""
    pointers = {m for path in [*(PROJECT / "deploy").iterdir(), DOCKER / "demo"]
                for m in re.findall(r"docs/deployment/([\w-]+\.md)#([\w-]+)", path.read_text())}  # fmt: skip
    assert ("docker.md", "a-docker-engine-on-debian") in pointers
    for page, section in pointers:
        headings = re.findall(r"^#+ (.+)$", (PROJECT / "docs" / "deployment" / page).read_text(), flags=re.MULTILINE)
        slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
        assert section in slugs, f"docs/deployment/{page}#{section}"


# ---- the README ------------------------------------------------------------------------------------------------------


def code_lines(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines()]


def test_readme_deploy_block_installs_every_host_and_names_an_absolute_out_dir():
    """The deploy block starts with what every host needs (the project, the default dataset's Debian package) and
    its run writes its results to an absolute out-dir on the SuperLink host."""
    text = (PROJECT / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL) if "deploy/make-certs" in b]
    lines = block.replace("\\\n", " ").splitlines()
    assert "pip install -e ." in lines[0] and "dataset-fashion-mnist" in lines[0] and "every host" in lines[0]
    (run,) = [line for line in lines if line.startswith("deploy/run ")]
    assert re.search(r"out-dir='/[^']+'", run), run


def test_readme_deploy_docker_and_flwr_run_lines_work_as_typed():
    """The deploy block saves the connection and admits the keys before deploy/run uses them; the Docker lines fetch
    the wheels and name the base image; plain `flwr run` streams, and the README and docs/running/run.md stop the
    local SuperLink with the same line."""
    lines = code_lines((PROJECT / "README.md").read_text())
    first = {}
    for i, line in enumerate(lines):
        for word in ("deploy/make-certs", "deploy/connect mylink", "deploy/register-supernodes mylink",
                     "deploy/run mylink", "docker/fetch-wheels", "docker/demo up"):  # fmt: skip
            if line.startswith(word) or f" {word}" in line:
                first.setdefault(word, i)
    assert first["deploy/connect mylink"] < first["deploy/register-supernodes mylink"] < first["deploy/run mylink"]
    assert first["docker/fetch-wheels"] < first["docker/demo up"]
    assert "BASE_IMAGE=" in lines[first["docker/demo up"]]
    flwr_runs = [line for line in lines if line.startswith("flwr run")]
    assert flwr_runs and all("--stream" in line for line in flwr_runs)
    # the line after `flwr run` that stops the local SuperLink it left running, the same in docs/running/run.md
    stop = [line.split("#")[0].strip() for line in lines if "stop the SuperLink" in line]
    run_page = code_lines((PROJECT / "docs" / "running" / "run.md").read_text())
    assert stop and stop[0] in [line.split("#")[0].strip() for line in run_page]
