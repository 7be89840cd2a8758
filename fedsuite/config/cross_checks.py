"""The checks that relate run-config keys to each other, run by `resolve` (fedsuite/config/run_config.py) after every
key passed its own check: names that are neither built-in nor an import path, a model that does not fit its
dataset, who can evaluate what, pruning marks, cohort sizes, and each algorithm's own rules (its registry entry) and
the system models' (fedsuite/systems/checks.py). Each check runs only when the keys it reads are present, that is
when they passed their own checks.
"""

from __future__ import annotations

from fedsuite.config.import_paths import is_import_path
from fedsuite.config.keys import Scalar, int_list
from fedsuite.config.schema import (
    BINARY_LABEL_DATASETS,
    COLOUR_DATASETS,
    DATA_FORMATS,
    DATASET_MODELS,
    DATASETS,
    MODELS,
)
from fedsuite.config.settings import value_of
from fedsuite.registry.known import algorithm_errors
from fedsuite.results.run_folder import run_name_problem
from fedsuite.server.pruning import parse_marks
from fedsuite.systems.checks import system_errors


def cross_checks(v: dict[str, Scalar]) -> list[str]:
    """Every problem of keys taken together, in a fixed order; `v` holds the keys that passed their own checks."""
    errors = model_and_data_errors(v) + evaluation_errors(v) + pruning_errors(v) + dataset_errors(v)
    has = all(k in v for k in ("sampling", "clients-per-round", "num-clients"))
    if has and v["sampling"] == "fixed" and int(v["clients-per-round"]) > int(v["num-clients"]):
        errors.append(f"clients-per-round={v['clients-per-round']}: must be <= num-clients={v['num-clients']} (S <= N)")
    if "algorithm" in v:  # the algorithm's own rules live in its registry entry
        errors += algorithm_errors(v)
    if v.get("agg-scale") == "1/N" and v.get("weighting") == "samples":
        errors.append("agg-scale='1/N' is the uniform sum Σ_S Δ_i / N; use weighting='uniform' with it")
    errors += system_errors(v)  # local work, deadline, availability, and client-level DP with them
    if "run-name" in v and (problem := run_name_problem(str(v["run-name"]))) is not None:
        errors.append(problem)  # one folder inside out-dir: nothing is written or removed outside it
    if v.get("client-state") == "device" and (v.get("checkpoint-every") or v.get("resume-from")):
        errors.append("client-state='device' keeps client state on the training device, where no checkpoint can "
                      "copy it; with checkpoint-every or resume-from use 'auto', 'memory' or 'disk'")  # fmt: skip
    if "lowrank-rank" in v and "lowrank-size" in v and int(v["lowrank-rank"]) > int(v["lowrank-size"]):
        errors.append(f"lowrank-rank={v['lowrank-rank']}: must be <= lowrank-size={v['lowrank-size']}")
    try:
        targets = [float(t) for t in str(value_of(v, "targets")).split(",") if t.strip()]
        if any(not 0.0 <= t <= 1.0 for t in targets):
            errors.append(f"targets={v['targets']!r}: each target must be an accuracy in [0, 1]")
    except ValueError:
        errors.append(f"targets={v['targets']!r}: expected comma-separated numbers such as '0.7,0.8'")
    return errors


def model_and_data_errors(v: dict[str, Scalar]) -> list[str]:
    """Names that are neither built-in nor an import path; natural partitions and their column."""
    errors = []
    if "dataset" in v and v["dataset"] not in DATASETS + DATA_FORMATS and not is_import_path(str(v["dataset"])):
        errors.append(
            f"dataset={v['dataset']!r}: allowed values are {', '.join(DATASETS + DATA_FORMATS)}, or "
            "'package.module:loader'"
        )
    if "model" in v and v["model"] not in MODELS and not is_import_path(str(v["model"])):
        errors.append(f"model={v['model']!r}: allowed values are {', '.join(MODELS)}, or 'package.module:factory'")
    if "model-args" in v and str(v["model-args"]).strip():
        import tomllib

        try:
            tomllib.loads(f"args = {v['model-args']}")["args"].items()
        except (tomllib.TOMLDecodeError, AttributeError) as err:
            errors.append(
                f"model-args={v['model-args']!r}: expected a TOML inline table such as '{{width=64}}' ({err})"
            )
    if v.get("partition") == "natural":
        if not str(value_of(v, "partition-column")).strip():
            errors.append("partition='natural': give partition-column=<the column whose values are the clients>")
        if str(value_of(v, "dataset")).startswith("synthetic-"):
            errors.append("partition='natural': the synthetic federations bring their own clients")
    return errors


def dataset_errors(v: dict[str, Scalar]) -> list[str]:
    """What a built-in dataset allows: its models, the binary label rule, FedMIM's colour perturbation."""
    errors = []
    fits = DATASET_MODELS.get(str(v.get("dataset")), ())
    builtin_dataset = "dataset" in v and v["dataset"] in DATASETS
    if v.get("model") in MODELS and builtin_dataset and v["model"] != "auto" and v["model"] not in fits:
        errors.append(
            f"model={v['model']!r} does not fit dataset={v['dataset']!r}: allowed are auto, {', '.join(fits)}"
        )
    if v.get("label-transform") == "binary" and "dataset" in v and v["dataset"] not in BINARY_LABEL_DATASETS:
        errors.append(
            f"label-transform='binary' is not defined for dataset={v['dataset']!r}: allowed datasets are "
            f"{', '.join(BINARY_LABEL_DATASETS)}; use label-transform='none'"
        )
    if v.get("colour-perturbation") is True and "dataset" in v and v["dataset"] not in COLOUR_DATASETS:
        errors.append(
            f"colour-perturbation=true is defined for 3-channel images only: allowed datasets are "
            f"{', '.join(COLOUR_DATASETS)}, not dataset={v['dataset']!r}"
        )
    return errors


def evaluation_errors(v: dict[str, Scalar]) -> list[str]:
    """Who can evaluate what: a server without data cannot evaluate centrally; targets need their metric."""
    errors = []
    if v.get("server-data") is False:
        errors += _serverless_errors(v)
    metric = v.get("target-metric")
    if metric in ("accuracy", "val-accuracy") and v.get("evaluation") == "federated":
        errors.append(
            f"target-metric={metric!r} is a central metric, but evaluation='federated': allowed are auto, "
            "fed-accuracy, fed-val-accuracy"
        )
    if metric in ("fed-accuracy", "fed-val-accuracy") and v.get("evaluation") == "central":
        errors.append(
            f"target-metric={metric!r} is a federated metric, but evaluation='central': allowed are auto, "
            "accuracy, val-accuracy"
        )
    if metric in ("val-accuracy", "fed-val-accuracy") and v.get("validation-fraction") == 0.0:
        errors.append(f"target-metric={metric!r} needs a validation split: set validation-fraction > 0")
    return errors


def _serverless_errors(v: dict[str, Scalar]) -> list[str]:
    """server-data=false: no central evaluation, and the model's shapes must be given."""
    errors = []
    if v.get("evaluation") in ("central", "both"):
        errors.append(
            f"evaluation={v['evaluation']!r} needs a test set on the server, but server-data=false: "
            "use evaluation='federated'"
        )
    if "input-shape" in v:
        try:
            shape = int_list(str(v["input-shape"]))
            if not shape or min(shape) < 1:
                raise ValueError
        except ValueError:
            errors.append(
                f"input-shape={v['input-shape']!r}: server-data=false needs one sample's shape as "
                "positive comma-separated integers, such as '8' or '3,32,32'"
            )
    if v.get("num-classes") == 0:
        errors.append("num-classes=0: server-data=false needs the number of classes (1 = regression)")
    if str(value_of(v, "dataset")).startswith("synthetic-"):
        errors.append("server-data=false: the synthetic federations are generated on the server too")
    return errors


def pruning_errors(v: dict[str, Scalar]) -> list[str]:
    """prune-at's marks: readable, on a validation column the run writes, before the last round."""
    if not str(value_of(v, "prune-at")).strip():
        return []
    errors = []
    try:
        parse_marks(str(v["prune-at"]))
    except ValueError as err:
        errors.append(f"prune-at={v['prune-at']!r}: {err}; write 'round:value' pairs such as '20:0.5,40:0.6'")
    score = str(value_of(v, "prune-score"))
    if v.get("validation-fraction") == 0.0:
        errors.append(f"prune-at needs a validation split (prune-score={score!r}): set validation-fraction > 0")
    federated = score.startswith("fed_")
    if v.get("evaluation") == ("central" if federated else "federated"):
        allowed = "val_accuracy, val_loss" if federated else "fed_val_accuracy, fed_val_loss"
        errors.append(
            f"prune-score={score!r} is never written with evaluation={v['evaluation']!r}: allowed are {allowed}"
        )
    try:
        last = max(parse_marks(str(v["prune-at"])), default=0)
    except ValueError:
        last = 0
    if "num-server-rounds" in v and last >= int(v["num-server-rounds"]):
        errors.append(
            f"prune-at: a mark at round {last} is not before the last round (num-server-rounds="
            f"{v['num-server-rounds']}), where it would call a finished run pruned"
        )
    return errors
