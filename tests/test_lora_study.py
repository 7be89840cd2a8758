"""The LoRA study (simulation/studies/lora.py): the fortunes loader on a fake fortunes folder, the GPT-2 + LoRA
factory's trainable parameters, the study's table (rounds and bytes to target, the paper's orderings), and a short
end-to-end study; the full study on the real fortunes files is marked slow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsuite.data.fortunes import PAD, TOPICS, UNKNOWN, DataError, entries, load, topics, vocabulary
from fedsuite.models.networks import seeded_model, trainable
from simulation.studies import lora as lora_study

pytest.importorskip("peft")
pytest.importorskip("transformers")

TOPIC_WORDS = {topic: [f"{topic}{k}" for k in range(6)] for topic in TOPICS}


def write_fortunes(folder: Path, per_topic: int = 10) -> Path:
    """One file per topic, entries separated by '%' lines; each entry mixes its topic's words and shared ones."""
    folder.mkdir(parents=True, exist_ok=True)
    for t, topic in enumerate(TOPICS):
        items = []
        for k in range(per_topic):
            own = TOPIC_WORDS[topic]
            items.append(f"The {own[k % 6]} and {own[(k + t) % 6]},\nsaid {own[(2 * k) % 6]} to the world {k}.")
        (folder / topic).write_text("\n%\n".join(items) + "\n%\n")
    return folder


def test_entries_are_split_on_lines_holding_a_single_percent(tmp_path):
    path = tmp_path / "topic"
    path.write_text("first line\nsecond 50% line\n%\nsecond entry\n%\n\n%\nlast\n")
    assert entries(path) == ["first line\nsecond 50% line", "second entry", "last"]


def test_loader_splits_per_topic_and_builds_the_vocabulary_from_training_only(tmp_path):
    folder = write_fortunes(tmp_path / "f")
    data = load(str(folder), seed=3, topics=("food", "sports"), vocab_size=32, seq_len=5)
    (x, y), (xt, yt) = data.train, data.test
    assert x.shape == (16, 5) and xt.shape == (4, 5) and x.dtype == np.int64 and data.num_classes == 2
    assert np.bincount(y).tolist() == [8, 8] and np.bincount(yt).tolist() == [2, 2]
    assert x.max() < 32 and (x[:, 0] != PAD).all()
    assert vocabulary(["b a, b", "c b a"], 4) == {"b": 2, "a": 3}  # most frequent first, ties alphabetically
    again = load(str(folder), seed=3, topics=("food", "sports"), vocab_size=32, seq_len=5)
    assert all(np.array_equal(a, b) for a, b in zip((*again.train, *again.test), (x, y, xt, yt), strict=True))
    other = load(str(folder), seed=4, topics=("food", "sports"), vocab_size=32, seq_len=5)
    assert not np.array_equal(other.train[0], x)


def test_words_seen_only_in_the_test_split_are_unknown(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a").write_text("\n%\n".join(["alpha"] * 4 + ["omega"]))  # 5 entries: 1 test
    (folder / "b").write_text("\n%\n".join(["beta"] * 5))
    outcomes = set()
    for seed in range(20):
        data = load(str(folder), seed=seed, topics=("a", "b"), vocab_size=8, seq_len=2, per_topic=5)
        omega_in_test = bool((data.test[0] == UNKNOWN).any())
        known_in_train = len(set(data.train[0][:, 0].tolist()))  # alpha, beta (+ omega when it trains)
        assert known_in_train == (2 if omega_in_test else 3) and UNKNOWN not in data.train[0]
        outcomes.add(omega_in_test)
    assert outcomes == {True, False}


def test_a_missing_folder_or_topic_is_one_line_naming_it(tmp_path):
    with pytest.raises(DataError, match="data-dir=.*no fortunes folder"):
        topics(str(tmp_path / "none"))
    write_fortunes(tmp_path / "f")
    (tmp_path / "f" / "law").unlink()
    with pytest.raises(DataError, match="topic file 'law' is missing; the topics are computers, food, law"):
        topics(str(tmp_path / "f"))


def test_the_factory_federates_the_lora_adapters_and_the_head_only():
    net = seeded_model("fedsuite.models.text:gpt2_lora", (12,), 6, "classification", 0,
                       "{vocab_size=50, width=16, layers=2, heads=2, rank=3}")  # fmt: skip
    net = net[0] if isinstance(net, tuple) else net
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n or n.startswith("head.") for n in names)
    # per block c_attn: A (3 × 16), B (48 × 3); the embedding: A (3 × 50), B (16 × 3); head 16 × 6 + 6
    assert sum(p.numel() for p in trainable(net)) == 2 * (3 * 16 + 48 * 3) + (3 * 50 + 16 * 3) + 16 * 6 + 6
    assert sum(p.numel() for p in net.parameters() if not p.requires_grad) > 5 * len(
        torch.nn.utils.parameters_to_vector(trainable(net))
    )
    ids = torch.tensor([[5, 6, 7, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD, PAD], [9] * 12])
    assert net(ids).shape == (2, 6)


def row(algorithm, each, completed=3):
    reached = [r for r in each if r is not None]
    return {"algorithm": algorithm, "completed": completed, "seeds": 3, "reached": len(reached),
            "rounds_to_target": (sum(reached) / len(reached), 0.0) if reached else None}  # fmt: skip


def test_orderings_compare_mean_rounds_and_count_an_unreached_target_as_slower():
    rows = [row("fadamgt", [10, 12, 14]), row("fadamet", [20, None, 20]), row("localadam", [15, 15, 15]),
            row("fedavg", [None, None, None])]  # fmt: skip
    found = {(o["faster"], o["slower"]): o for o in lora_study.orderings(rows)}
    verdicts = {pair: o["reproduced"] for pair, o in found.items()}
    assert verdicts == {("fadamgt", "localadam"): True, ("fadamgt", "fadamet"): True,
                        ("fadamet", "localadam"): False, ("localadam", "fedavg"): True}  # fmt: skip
    assert found["fadamgt", "localadam"]["gap"] == 3.0
    assert (
        lora_study.verdict(found["fadamgt", "localadam"]) == "reproduces (3.0 rounds apart, beyond the seeds' std 0.0)"
    )
    assert "does not reproduce (one side" in lora_study.verdict(found["fadamet", "localadam"])
    # a method with a failed seed is not compared on the seeds that were left
    (partial,) = lora_study.orderings([row("fadamgt", [10, 12], completed=2), row("localadam", [15, 15, 15])])
    assert partial["reproduced"] is False and partial["gap"] is None


SHORT = ("num-clients=4 clients-per-round=2 tracking-clients=2 eval-every=1 batch-size=8 "
         "model-args='{width=16, layers=1, heads=2, rank=2}'")  # fmt: skip


def test_short_study_writes_the_table_plot_and_runs_and_resumes(tmp_path, capsys):
    folder = write_fortunes(tmp_path / "fortunes")
    out = tmp_path / "study"
    argv = ["--out", str(out), "--seeds", "1", "--rounds", "1", "--targets", "0.01", "-c",
            f"data-dir='{folder}' {SHORT}"]  # fmt: skip
    assert lora_study.main(argv) == 0
    table = (out / "table.md").read_text()
    assert "The shape of the paper's experiment, not its numbers" in table
    assert (out / "accuracy.png").stat().st_size > 0
    rows = {r["algorithm"]: r for r in lora_study.aggregate(lora_study.jobs_for(
        list(lora_study.ALGORITHMS), [1], {}, out.resolve()), 0.01)}  # fmt: skip
    for algorithm, vectors in (("localadam", 2), ("fedavg", 2), ("fadamet", 4), ("fadamgt", 4)):  # Y = S
        r = rows[algorithm]
        assert r["completed"] == r["reached"] == 1 and r["rounds_to_target"] == (1.0, 0.0)
        assert r["vectors_per_client_round"][0] == vectors
        summary = json.loads((out / "runs" / algorithm / "seed-1" / "summary.json").read_text())
        dim = summary["communication_bytes_per_client"] / summary["communication_vectors_per_client"] / 4
        assert r["mb_to_target"][0] == pytest.approx(vectors * dim * 4 / 1e6)  # one round, float32
    config = json.loads((out / "runs" / "fadamgt" / "seed-1" / "config.json").read_text())["run_config"]
    assert config["lr"] == lora_study.LEARNING_RATES["fadamgt"] and config["seed"] == 1
    capsys.readouterr()
    assert lora_study.main(argv) == 0  # rerun: every run is reused
    assert capsys.readouterr().out.count("reused") == 4


def test_bad_input_is_refused_before_training(tmp_path, capsys):
    assert lora_study.main(["--out", str(tmp_path), "--algorithms", "fedavg,scaffold"]) == 2
    assert "--algorithms: scaffold not in the study" in capsys.readouterr().err
    assert lora_study.main(["--out", str(tmp_path), "--seeds", "0,x"]) == 2
    assert "--seeds '0,x': allowed are comma-separated integers" in capsys.readouterr().err
    assert lora_study.main(["--out", str(tmp_path), "--targets", "0.4,45"]) == 2
    assert "targets accuracies in (0, 1]" in capsys.readouterr().err
    assert lora_study.main(["--out", str(tmp_path), "-c", f"data-dir='{tmp_path / 'none'}'"]) == 2
    assert "no fortunes folder" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_full_study_on_the_real_fortunes(tmp_path):
    """The committed study (docs/lora-study) on the real files: every run completes, FAdamGT reaches the target in
    every seed, and every run reaches its targets in the rounds the committed run did (seeded, reproducible)."""
    if not Path("/usr/share/games/fortunes/computers").is_file():
        pytest.skip("apt-get install fortunes")
    assert lora_study.main(["--out", str(tmp_path)]) == 0
    rows = {r["algorithm"]: r for r in lora_study.aggregate(lora_study.jobs_for(
        list(lora_study.ALGORITHMS), [0, 1, 2], {}, tmp_path.resolve()), 0.4)}  # fmt: skip
    assert all(r["completed"] == 3 for r in rows.values()) and rows["fadamgt"]["reached"] == 3
    committed = Path(__file__).resolve().parent.parent / "docs" / "lora-study" / "runs"
    for run in committed.glob("*/seed-*/summary.json"):
        again = tmp_path / "runs" / run.parent.parent.name / run.parent.name / "summary.json"
        assert json.loads(again.read_text())["rounds_to_target"] == json.loads(run.read_text())["rounds_to_target"]
