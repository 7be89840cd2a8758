"""The worked example of a new mechanism on docs/developer/architecture.md#where-new-things-go works as printed: its
code, taken from the page, registered as the page says (one more stage from server_stages), puts the largest upload
norm of each round's valid replies in the row, and changes no number of the run."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from fedsuite import testing as kit
from fedsuite.server import compose

PAGE = Path(__file__).resolve().parent.parent / "docs" / "developer" / "architecture.md"


def example_stage() -> type:
    section = PAGE.read_text().split("## Where new things go", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 - the page's own example
    return namespace["UploadNorms"]


def test_the_pages_stage_reports_the_largest_upload_norm_and_changes_nothing(monkeypatch):
    seen: dict[int, float] = {}

    class Checked(example_stage()):
        def received(self, server_round, replies):  # the same replies, their norm computed apart
            seen[server_round] = max(float(np.linalg.norm(np.concatenate(list(r.arrays.values())))) for r in replies)
            return super().received(server_round, replies)

    plain = kit.run_algorithm("scaffold", kit.PARTIAL)
    built = compose.server_stages
    monkeypatch.setattr(compose, "server_stages", lambda *args: [*built(*args), Checked()])
    run = kit.run_algorithm("scaffold", kit.PARTIAL)
    assert np.array_equal(run.x, plain.x)  # a figure in the row changes no number of the run
    assert [o.round for o in run.rounds] == sorted(seen) and len(seen) == kit.PARTIAL["num-server-rounds"]
    for observation in run.rounds:
        assert "upload_norm_max" not in plain.rounds[0].row
        assert np.isclose(observation.row["upload_norm_max"], seen[observation.round], rtol=1e-9)
