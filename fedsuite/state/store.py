"""Per-partition client state (SCAFFOLD c_i, FedDyn ∇L_i, FedSpeed ĝ_i, FedADMM λ_i …), docs/algorithms/index.md.

A client's vectors are created lazily (zeros) on its first participation, loaded once per fit and written
back once after it, always as one file per partition (`partition-<id>.state`, fedsuite/state/files.py), replaced
atomically (DiskStore). Never in a node's
Flower Context.state: a SuperNode trains many partitions, and Flower's simulation engine may run two
messages of one node on two workers at once and write the node's Context back last-write-wins, which would lose
one partition's update. Where the files live (`state_root`), chosen identically by server and clients:
- memory: a per-run folder in RAM (/dev/shm when the machine has it, else the temp folder), used while the whole
  federation's state fits the budget; the ServerApp removes it when the run ends (checkpoints keep copies);
- disk: `client-state-dir`, or a per-run temp folder, above the budget or with client-state='disk'
  (deployments that must survive a SuperNode restart, and Ray clusters, point it at a path the nodes share).

No client ahead of the server: a fit writes its new vectors at once but keeps the ones they replace (`prev:`
entries, tagged with the round; on disk, links to the file that held them, DiskStore). The server tells each client,
in its next fit message, the last round in which it accepted that client's reply (`state-accepted`); if that is not
the round of the write, the reply was rejected or lost, and the client restores the previous vectors before it
trains. So every client's state is always the one the server's state was built from (SCAFFOLD c = mean_N c_i,
FAdamGT y = mean_N y_i …), at the cost of one extra copy of a client's vectors between two of its participations
(counted in the estimate).
A folder of client state belongs to one run: `owner.json` records its state key (and results folder), written by
the server before training and by a client before its first file; a run refuses a folder that holds another run's
vectors, or vectors with no owner record (`check_owner`, docs/running/scale.md#where-client-state-lives).
One write only: state held on the nodes (not in checkpoints) follows a resumed run exactly when the crashed run
trained at most one round past the checkpoint (checkpoint-every=1; fedsuite.results.checkpoint.check_node_held_state).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import torch

from fedsuite.codec.npy_bytes import member_names as npz_members
from fedsuite.codec.npy_bytes import read_member as read_npz_member
from fedsuite.state.files import (
    Index,
    StateFileError,
    read_arrays,
    read_index,
    read_linked,
    read_member,
    write_state_file,
)

BYTES_PER_FLOAT = 4


STATE_SUFFIX = ".state"  # a partition's client-state file: partition-<id>.state (fedsuite.state.files)
LEGACY_SUFFIX = ".npz"  # the same, as versions before this format wrote it
STATE_FILE_PATTERNS = (f"partition-*{STATE_SUFFIX}", f"partition-*{LEGACY_SUFFIX}", f"previous-*{STATE_SUFFIX}")

COPIES = 2  # the vectors, and the previous ones until the server confirms the reply that replaced them
PREVIOUS = "prev:"  # key prefix of the previous vectors
ABSENT = "absent:"  # key prefix marking a vector that did not exist before the unconfirmed write
WRITE_ROUND = "write-round"  # the round of the unconfirmed write


def state_bytes(num_clients: int, dim: int, vectors: int, extra: int = 0) -> int:
    """N × (d × vectors + extra) × 4 B × 2 copies: the whole federation's client state once every client has
    participated (`extra`: floats per client beside the d-vectors, such as the model's own buffers)."""
    return num_clients * (dim * vectors + extra) * BYTES_PER_FLOAT * COPIES


def choose_backend(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float, extra: int = 0) -> str:
    if mode != "auto":
        return mode
    return "memory" if state_bytes(num_clients, dim, vectors, extra) <= budget_mb * 2**20 else "disk"


def describe(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float, extra: int = 0) -> str:
    total = state_bytes(num_clients, dim, vectors, extra)
    where = choose_backend(mode, num_clients, dim, vectors, budget_mb, extra)
    size = f"d={dim:,} × {vectors} vector(s)" + (f" + {extra:,} buffer floats" if extra else "")
    size = size if not extra or vectors else f"{extra:,} buffer floats"
    return (
        f"client state: N={num_clients} × {size} × 4 B × {COPIES} (current + last "
        f"confirmed) = {total / 2**20:,.1f} MiB "
        f"→ {'in memory (' + str(SHARED_MEMORY) + ')' if where == 'memory' else 'on disk'}, one file per partition"
    )


SHARED_MEMORY = Path("/dev/shm")
WARN_FRACTION = 0.8  # an estimate above this share of the room left is worth a warning


def free_bytes(folder: Path) -> int:
    """Bytes free to an unprivileged writer in the file system that holds `folder` (or would: its nearest
    existing parent)."""
    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def state_folder(where: str, configured: str) -> Path:
    """The file system a run's client state goes to (state_root without the per-run part)."""
    if where == "disk" and configured:
        return Path(configured).expanduser()
    return state_root(where, "", 0).parent


def room(where: str, folder: Path) -> tuple[int, str]:
    """The bytes client state can take in `folder` and what limits them: the free space of its file system, and
    for memory state also the RAM available (a RAM folder's pages are memory; /dev/shm's size may exceed it)."""
    free = free_bytes(folder)
    what = f"{folder} has {free / 2**20:,.0f} MiB free"
    if where == "memory":
        ram = memory_available()
        if ram is not None and ram < free:
            return ram, f"RAM has {ram / 2**20:,.0f} MiB available ({folder} {free / 2**20:,.0f} MiB free)"
        if ram is not None:
            what += f" (RAM {ram / 2**20:,.0f} MiB available)"
    return free, what


def capacity_check(mode: str, num_clients: int, dim: int, vectors: int, budget_mb: float,
                   configured: str = "", extra: int = 0) -> tuple[str, str] | None:  # fmt: skip
    """Compare the client-state estimate with the room where it will live: ("error", line) when it does not fit,
    ("warning", line) above WARN_FRACTION of the room, else None. Each line names the numbers and the way out."""
    total = state_bytes(num_clients, dim, vectors, extra)
    if not total:
        return None
    where = choose_backend(mode, num_clients, dim, vectors, budget_mb, extra)
    folder = state_folder(where, configured)
    space, what = room(where, folder)
    fits = max(0, int(space // max(1, state_bytes(1, dim, vectors, extra))))
    size = f"(d={dim:,} × {vectors} + {extra:,})" if extra else f"d={dim:,} × {vectors}"
    need = f"client state needs {total / 2**20:,.0f} MiB (N={num_clients} × {size} × 4 B × {COPIES})"
    if where == "memory":
        out = ("use client-state='disk' with client-state-dir=<a folder with room>, or fewer clients "
               f"(num-clients ≤ {fits:,} fit)")  # fmt: skip
        label = "in memory" if mode == "memory" else f"in memory (client-state='auto', under {budget_mb:g} MiB)"
    else:
        out = f"choose a client-state-dir with room, or fewer clients (num-clients ≤ {fits:,} fit)"
        label = f"on disk in {folder}"
    if total > space:
        return "error", f"{need} {label}, but {what}: it does not fit; {out}"
    if total > WARN_FRACTION * space:
        return "warning", f"{need} {label}: {total / max(space, 1):.0%} of the room ({what}); {out}"
    return None


def state_root(where: str, configured: str, run_id: int) -> Path:
    """The folder of a run's client-state files: `where` is choose_backend's answer, `configured` the
    client-state-dir (used by disk mode only), `run_id` Flower's run id (the same on server and clients)."""
    if where == "disk" and configured:
        return Path(configured).expanduser()
    if where == "memory":
        base = SHARED_MEMORY if SHARED_MEMORY.is_dir() else Path(tempfile.gettempdir())
        return base / "fedsuite-client-state-memory" / f"run-{run_id}"
    return Path(tempfile.gettempdir()) / "fedsuite-client-state" / f"run-{run_id}"


def is_run_scoped(root: Path, run_id: int) -> bool:
    """True for the per-run folders state_root makes up (removed at the end of the run), not a configured one."""
    return root.name == f"run-{run_id}" and root.parent.name.startswith("fedsuite-client-state")


OWNER = "owner.json"  # in a client-state folder: the state key of the run whose vectors it holds


class StateFolderTaken(ValueError):
    """A client-state folder holds another run's client state (or vectors of unknown origin)."""


def owner(root: Path) -> dict | None:
    """The owner record of a client-state folder ({"state-key": …, "results": …}), None when there is none; an
    unreadable record counts as a foreign owner."""
    path = Path(root) / OWNER
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        return record if isinstance(record, dict) and "state-key" in record else {"state-key": "?"}
    except (OSError, ValueError):
        return {"state-key": "?"}


def check_owner(root: Path, state_key: int | str | None, key: str = "client-state-dir") -> None:
    """A run uses only its own client state: refuse `root` when it holds vectors of another run (its owner record
    names another state key) or of no known run (partition files without an owner record). `state_key`: the run's
    (a resumed run's: its checkpoint's); None for a run whose key is not known yet (a new run before Flower
    starts), which accepts only a folder without vectors or owner."""
    root = Path(root)
    record = owner(root)
    vectors = root.is_dir() and bool(state_files(root))
    if record is None and not vectors:
        return
    if record is not None and state_key is not None and str(record["state-key"]) == str(state_key):
        return
    results = record.get("results") if record else None
    if record is None:
        whose = "client-state files of an unknown run (no owner record)"
    else:
        whose = f"the client state of another run (state key {record['state-key']}"
        whose += f", results {results})" if results else ")"
    resume = f"resume-from='{results}'" if results else "resume-from=<its results folder>"
    raise StateFolderTaken(
        f"{key}={str(root)!r} holds {whose}; a run never starts from another run's client state: choose another "
        f"{key}, or empty this one (its partition-* and previous-* files and {OWNER}); to continue that run, resume "
        f"it ({resume})"
    )


def claim(root: Path, state_key: int | str, results: str | None = None, key: str = "client-state-dir") -> None:
    """check_owner, then record this run as the folder's owner. The record is written whole beside the folder's
    files and linked into place, so it appears complete or not at all, and of two runs that claim one folder at
    once the second is refused."""
    root = Path(root)
    check_owner(root, state_key, key)
    if owner(root) is not None:
        return
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{OWNER}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"state-key": str(state_key), "results": results}, f)
        os.link(tmp, root / OWNER)
    except FileExistsError:
        check_owner(root, state_key, key)  # another process claimed it just now: ours, or refused
    finally:
        Path(tmp).unlink(missing_ok=True)


_UNREAD = object()  # a member of the partition's file not read yet


def state_files(root: Path) -> list[Path]:
    """The client-state files in `root`, sorted: this version's `partition-<id>.state` and the `.npz` files of
    earlier versions (a resumed run's checkpoint may hold them; DiskStore reads them and writes the new format)."""
    root = Path(root)
    return sorted(path for pattern in STATE_FILE_PATTERNS for path in root.glob(pattern))


def file_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of one client-state file (this version's format or an earlier version's `.npz`), by name."""
    path = Path(path)
    if path.suffix == LEGACY_SUFFIX:
        return {name: read_npz_member(path, name) for name in npz_members(path)}
    return read_arrays(path)


class DiskStore(MutableMapping):
    """Named arrays of one partition in `root/partition-<id>.state` (fedsuite.state.files: raw bytes after a small
    header); the file is replaced atomically. A member is read from the file when it is first asked for, so one that
    is only deleted (the previous vectors of a write the server confirmed, fedsuite.state.store.settle) is never read. A
    partition with only a `.npz` file of an earlier version is read from it, and its first write replaces it.

    The previous vectors of a write are not written again: `keep_previous` marks a vector that still holds the
    file's own bytes, and `flush` then keeps that file under a second name (a hard link, no copy), one of the
    partition's two names `previous-<id>-a.state` and `-b.state` that the file does not link to, and writes a link
    to it in the new file's header. Once the new file is in place, a kept name it does not link to is removed, so a
    partition holds at most its file and two kept files, and a crash at any step leaves the state it replaced."""

    def __init__(self, root: Path, partition_id: int, owner_key: int | str | None = None):
        """`owner_key`: the run's state key, recorded as the folder's owner (claim) before its first file."""
        stem = Path(root) / f"partition-{partition_id:06d}"
        self.path, self.legacy = stem.with_suffix(STATE_SUFFIX), stem.with_suffix(LEGACY_SUFFIX)
        self.kept_names = tuple(f"previous-{partition_id:06d}-{tag}{STATE_SUFFIX}" for tag in "ab")
        self.owner_key = owner_key
        self._arrays: dict[str, np.ndarray] | None = None
        self._index: Index | None = None  # self.path as loaded (or last written); None: read from self.legacy
        self._links: dict[str, tuple[str | None, str]] = {}  # key → (kept file; None: self.path as loaded, member)
        self._held: dict[str, np.ndarray] = {}  # a linked key's value where it was in memory when marked
        self._own: set[str] = set()  # keys whose value is still the loaded file's own member
        self._indexes: dict[str, Index] = {}  # kept file → its index

    def _load(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = {}
            if self.path.is_file():
                self._index = read_index(self.path)
                self._arrays = dict.fromkeys([*self._index.members, *self._index.links], _UNREAD)
                self._links = dict(self._index.links)
                self._own = set(self._index.members)
            elif self.legacy.is_file():
                self._arrays = dict.fromkeys(npz_members(self.legacy), _UNREAD)
        return self._arrays

    def __getitem__(self, key):
        arrays = self._load()
        value = arrays[key]
        if value is _UNREAD:
            if key in self._links:
                file, member = self._links[key]
                value = self._held.get(key)
                if value is None and file is None:  # a member of the file as loaded, marked by keep_previous
                    value = read_member(self.path, self._index, member)
                elif value is None:
                    value = read_linked(self.path, key, (file, member), self._indexes)
            elif self._index is not None:
                value = read_member(self.path, self._index, key)
            else:  # a copy, writable as a value read from a .state file is
                value = read_npz_member(self.legacy, key).copy()
            arrays[key] = value
        return value

    def __setitem__(self, key, value):
        self._load()[key] = value
        self._forget(key)

    def __delitem__(self, key):
        del self._load()[key]
        self._forget(key)

    def _forget(self, key) -> None:
        self._own.discard(key)
        self._links.pop(key, None)
        self._held.pop(key, None)

    def __contains__(self, key):  # without reading the member (Mapping's own asks for the value)
        return key in self._load()

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())

    def keep_previous(self, name: str, key: str) -> bool:
        """Make `key` the current value of `name` without copying it, where that value is still the file's own
        member: the next flush keeps the file and links to it. False where it is not (then copy it)."""
        arrays = self._load()
        if name not in self._own or self._index is None:
            return False
        value = arrays[name]
        arrays[key] = _UNREAD
        self._forget(key)
        self._links[key] = (None, name)
        if value is not _UNREAD:
            self._held[key] = value  # a reference, no copy: the value if the file is replaced meanwhile
        return True

    def flush(self) -> None:
        """Replace the file at once: written beside it and renamed; a failure at any byte (a full disk) removes
        the temporary file and leaves the previous file as it was. Keys keep_previous marked become links to the
        file as loaded, kept under a free kept name (copied where none is free, where the file was replaced since
        it was loaded and their values are in memory, or where the file system has no hard links). A `.npz` file of
        an earlier version, and kept files no longer linked to, go once the new file is in place."""
        arrays = self._load()
        root = self.path.parent
        root.mkdir(parents=True, exist_ok=True)
        if self.owner_key is not None and not (root / OWNER).is_file():
            claim(root, self.owner_key)
        older = {key: link for key, link in self._links.items() if link[0] is not None}  # settled: none
        marked = {key: member for key, (file, member) in self._links.items() if file is None}
        on_disk = {file for file, _ in self._index.links.values()} if self._index is not None else set()
        free = [name for name in self.kept_names if name not in on_disk | {file for file, _ in older.values()}]
        keep = free[0] if marked and free else None
        if keep is not None and _identity(self.path) != self._index.identity:  # replaced since it was loaded
            if not marked.keys() <= self._held.keys():
                raise StateFileError(f"{self.path} changed while it was read (replaced by another writer?)")
            keep = None  # copied from memory
        created = keep is not None and _link_into_place(self.path, root / keep)  # the file as loaded, kept
        links = {**older, **({key: (keep, member) for key, member in marked.items()} if created else {})}
        try:
            values = {key: self[key] for key in arrays if key not in links}  # members not read yet are read now
            fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{self.path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    write_state_file(f, values, links)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except BaseException:
            if created:
                (root / keep).unlink(missing_ok=True)  # nothing links to it: the file as loaded is still in place
            raise
        linked = {file for file, _ in links.values()}
        for name in self.kept_names:  # kept files no file links to (the last write's, or a crash's)
            if name not in linked:
                (root / name).unlink(missing_ok=True)
                self._indexes.pop(name, None)
        self.legacy.unlink(missing_ok=True)
        # the file just written is the one a later keep_previous of this store links to
        self._index, self._links, self._held, self._own = read_index(self.path), links, {}, set(values)


def _identity(path: Path) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino, stat.st_size


NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOSYS, errno.EOPNOTSUPP}


def _link_into_place(source: Path, target: Path) -> bool:
    """`target` becomes another name of `source`'s file; False where the file system has no hard links. No file
    links to `target` (DiskStore.flush picks it so): what is there (a crash's leftover) is removed first."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError as err:
        if err.errno in NO_HARD_LINKS:
            return False
        raise
    return True


class ClientState:
    """One client's persistent d-vectors as tensors on the training device.

    `accepted_round`: the last round whose reply from this client the server accepted (0: none yet), as the
    server sent it; None skips the check (a client used outside a federation). `names`: the client's declared
    state (fedsuite.rules.declared); a name outside it is a programming error, refused (None: any name)."""

    def __init__(self, store: MutableMapping, dim: int, device: torch.device | str = "cpu", names=None):
        self.store, self.dim, self.device = store, dim, device
        self.names = frozenset(names) if names is not None else None
        self.accepted_round: int | None = None
        self._tensors: dict[str, torch.Tensor] = {}
        self._reconciled = False

    def _declared(self, name: str) -> None:
        if self.names is not None and name not in self.names:
            raise KeyError(f"client state {name!r} is not declared (state_specs declares {sorted(self.names)})")

    def get(self, name: str) -> torch.Tensor:
        """The stored vector, or zeros on first use (every client state starts at 0)."""
        self._declared(name)
        self._reconcile()
        if name not in self._tensors:
            if name in self.store:
                self._tensors[name] = torch.tensor(np.asarray(self.store[name]), device=self.device)
            else:
                self._tensors[name] = torch.zeros(self.dim, device=self.device)
        return self._tensors[name]

    def set(self, name: str, value: torch.Tensor) -> None:
        self._declared(name)
        self._reconcile()
        self._tensors[name] = value.detach().clone()

    def has(self, name: str) -> bool:
        self._reconcile()
        return name in self._tensors or name in self.store

    def save(self, server_round: int | None = None) -> None:
        """Write the vectors; with `server_round`, keep the ones they replace until the server confirms."""
        self._reconcile()
        disk = isinstance(self.store, DiskStore)
        if server_round is not None:
            for name in self._tensors:
                if name not in self.store:
                    self.store[ABSENT + name] = np.zeros(0, np.float32)
                elif not (disk and self.store.keep_previous(name, PREVIOUS + name)):  # a file keeps it, or a copy
                    self.store[PREVIOUS + name] = np.asarray(self.store[name])
            self.store[WRITE_ROUND] = np.array([server_round], np.int64)
        for name, tensor in self._tensors.items():
            self.store[name] = tensor.detach().cpu().numpy()
        if disk:
            self.store.flush()

    def _reconcile(self) -> None:
        """Once per fit, before anything is read: confirm or undo the last write (module docstring)."""
        if self._reconciled:
            return
        self._reconciled = True
        if self.accepted_round is not None:
            settle(self.store, self.accepted_round)


def settle(store: MutableMapping, accepted_round: int) -> None:
    """Keep the last write if the server accepted its round, else restore what it replaced; drop the copies."""
    if WRITE_ROUND not in store:
        return
    confirmed = int(np.asarray(store[WRITE_ROUND])[0]) == accepted_round
    for key in [k for k in store if k.startswith((PREVIOUS, ABSENT))]:
        name = key.split(":", 1)[1]
        if not confirmed:
            if key.startswith(PREVIOUS):
                store[name] = np.asarray(store[key])
            elif name in store:
                del store[name]
        del store[key]
    del store[WRITE_ROUND]


def effective(store: MutableMapping, accepted_round: int) -> dict[str, np.ndarray]:
    """The vectors a client would train with next, given the server's last accepted round (for invariant checks;
    the store is not changed)."""
    copy = {k: np.asarray(store[k]) for k in store}
    settle(copy, accepted_round)
    return copy
