"""The app's ServerApp: fedsuite's strategy for the configured algorithm, started from the app's own model."""

from pathlib import Path

from flwr.common import Context
from flwr.server import ServerApp

from fedsuite import app as fedsuite_app
from user_app.task import evaluate, make_model, split_config


def server_fn(context: Context):
    algorithm, settings, own = split_config(context.run_config)
    results = Path(str(own["results-dir"])) / f"{algorithm}-run-{context.run_id}"
    strategy = fedsuite_app.strategy(algorithm, make_model(), evaluate=evaluate, results=results, **settings)
    return fedsuite_app.server_components(strategy)


app = ServerApp(server_fn=server_fn)
