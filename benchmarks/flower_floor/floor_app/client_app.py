"""The ClientApp: load the global weights, train or evaluate locally, reply."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from floor_app.task import build_model, evaluate, train

app = ClientApp()


def _model(msg: Message, context: Context) -> torch.nn.Module:
    torch.set_num_threads(int(context.run_config["threads"]))
    model = build_model(context.run_config)
    model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
    return model


@app.train()
def train_round(msg: Message, context: Context) -> Message:
    """``local-steps`` SGD steps from the global weights; the new weights and the time."""
    model = _model(msg, context)
    partition = int(context.node_config["partition-id"])
    server_round = int(msg.content.config_records["config"]["server-round"])
    metrics = train(
        model, context.run_config, partition, round_seed=server_round * 1000 + partition
    )
    metrics["num-examples"] = int(context.run_config["samples"])
    reply = RecordDict(
        {"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)}
    )
    return Message(content=reply, reply_to=msg)


@app.evaluate()
def evaluate_round(msg: Message, context: Context) -> Message:
    """Accuracy of the global weights on this node's evaluation samples."""
    model = _model(msg, context)
    metrics = evaluate(model, context.run_config, int(context.node_config["partition-id"]))
    metrics["num-examples"] = int(context.run_config["eval-samples"])
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
