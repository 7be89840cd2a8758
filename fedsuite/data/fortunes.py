"""Topic classification on Debian's `fortunes` package, offline: `dataset='fedsuite.data.fortunes:topics'`.

The package (`apt-get install fortunes`) keeps one text file per topic in /usr/share/games/fortunes (`data-dir`
names another folder of the same layout); the entries of a file are separated by lines holding a single '%'. Each
entry is one sample, its topic the label. Per topic at most `PER_TOPIC` entries are kept (a seeded draw), then
a seeded, per-topic 80/20 train/test split. Texts become token ids without any download: a word-level vocabulary
(lower-cased words and single punctuation marks) built from the **training split only**, the `VOCAB_SIZE` − 2 most
frequent words (ties in alphabetical order), id 0 = padding, id 1 = a word outside the vocabulary; every entry is
cut or right-padded to `SEQ_LEN` ids. Everything depends on the files and the run seed only.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from fedsuite.data.own import DataError, LoadedData

FORTUNES_DIR = "/usr/share/games/fortunes"
TOPICS = ("computers", "food", "law", "politics", "science", "sports")  # distinct vocabularies, ≥ 147 entries each
PER_TOPIC = 200
TEST_FRACTION = 0.2
VOCAB_SIZE = 2048
SEQ_LEN = 48
PAD, UNKNOWN = 0, 1
_WORD = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def entries(path: Path) -> list[str]:
    """The non-empty entries of one fortune file (entries separated by lines holding a single '%')."""
    text = path.read_text(encoding="utf-8", errors="replace")
    out, current = [], []
    for line in text.splitlines():
        if line.strip() == "%":
            out.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    out.append("\n".join(current).strip())
    return [e for e in out if e]


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def vocabulary(texts: list[str], size: int) -> dict[str, int]:
    """word → id for the size − 2 most frequent words of `texts` (ties alphabetically); ids 0, 1 are reserved."""
    counts = Counter(w for t in texts for w in words(t))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: size - 2]
    return {w: i + 2 for i, (w, _) in enumerate(ranked)}


def encode(texts: list[str], vocab: dict[str, int], length: int) -> np.ndarray:
    """(n, length) int64 ids: the first `length` words, unknown words as UNKNOWN, right-padded with PAD."""
    ids = np.full((len(texts), length), PAD, dtype=np.int64)
    for row, text in enumerate(texts):
        tokens = [vocab.get(w, UNKNOWN) for w in words(text)][:length]
        ids[row, : len(tokens)] = tokens
    return ids


def read_topics(folder: Path, topics: tuple[str, ...]) -> list[list[str]]:
    """The entries of every topic file, one list per topic; a missing or empty file is a one-line DataError."""
    if not folder.is_dir():
        raise DataError(f"data-dir={str(folder)!r}: no fortunes folder there (apt-get install fortunes, or point "
                        "data-dir at a folder of topic files)")  # fmt: skip
    out = []
    for topic in topics:
        path = folder / topic
        if not path.is_file():
            raise DataError(f"data-dir={str(folder)!r}: topic file {topic!r} is missing; the topics are "
                            f"{', '.join(topics)}")  # fmt: skip
        found = entries(path)
        if len(found) < 2:
            raise DataError(f"{path}: {len(found)} entries; a topic needs at least 2 (entries separated by '%' lines)")
        out.append(found)
    return out


def load(data_dir: str, seed: int, topics: tuple[str, ...] = TOPICS, per_topic: int = PER_TOPIC,
         vocab_size: int = VOCAB_SIZE, seq_len: int = SEQ_LEN, test_fraction: float = TEST_FRACTION,
         ) -> LoadedData:  # fmt: skip
    """Token ids and topic labels (label k = topics[k]) from the fortune files in `data_dir` (module docstring)."""
    rng = np.random.default_rng(seed)
    split: dict[str, list[tuple[str, int]]] = {"train": [], "test": []}
    for label, texts in enumerate(read_topics(Path(data_dir or FORTUNES_DIR), topics)):
        chosen = [texts[i] for i in rng.permutation(len(texts))[:per_topic]]
        n_test = max(1, round(test_fraction * len(chosen)))
        split["test"] += [(t, label) for t in chosen[:n_test]]
        split["train"] += [(t, label) for t in chosen[n_test:]]
    vocab = vocabulary([t for t, _ in split["train"]], vocab_size)
    arrays = {}
    for which, pairs in split.items():
        order = rng.permutation(len(pairs))
        texts, labels = [pairs[i][0] for i in order], [pairs[i][1] for i in order]
        arrays[which] = (encode(texts, vocab, seq_len), np.asarray(labels, dtype=np.int64))
    return LoadedData(train=arrays["train"], test=arrays["test"], num_classes=len(topics))


def topics(data_dir: str = "", seed: int = 0) -> LoadedData:
    """`dataset='fedsuite.data.fortunes:topics'`: the six TOPICS, PER_TOPIC entries each, SEQ_LEN ids."""
    return load(data_dir, seed)
