"""The app's ClientApp: each SuperNode is one partition (its node config) and trains with fedsuite's client."""

from flwr.client import ClientApp
from flwr.common import Context

from fedsuite import app as fedsuite_app
from user_app.task import load_data, make_model, split_config, state_dir


def client_fn(context: Context):
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    algorithm, settings, own = split_config(context.run_config)
    train, test = load_data(partition_id, num_partitions)
    return fedsuite_app.client(
        algorithm, make_model(), train, test=test, partition_id=partition_id, num_partitions=num_partitions,
        state_dir=state_dir(own, context.run_id), **settings,
    ).to_client()  # fmt: skip


app = ClientApp(client_fn=client_fn)
