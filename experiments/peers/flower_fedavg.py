"""FedAvg in Flower (its Message API): a ClientApp training the PyTorch model, a ServerApp running the FedAvg
strategy (``fraction_train`` samples the cohort), both run by the Ray-based simulation engine
(``flwr.simulation.run_simulation``), with Flower's default resources (2 CPUs a client: one client at a time on a
2-core machine)."""

import functools

import numpy as np
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from torch.utils.data import DataLoader, RandomSampler

from .torch_models import accuracy, make_model


@functools.cache  # once per process: each Ray worker loads the training set once
def load(dataset_path: str, shards_path: str):
    with np.load(dataset_path) as arrays, np.load(shards_path) as shards:
        return (torch.from_numpy(arrays["x_train"]), torch.from_numpy(arrays["y_train"]).long(), shards["indices"],
                shards["sizes"])


def client_app(arm, dataset_path: str, shards_path: str, seed: int) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        images, labels, indices, sizes = load(dataset_path, shards_path)
        client, server_round = context.node_config["partition-id"], msg.content["config"]["server-round"]
        shard = torch.from_numpy(indices[client, :sizes[client]])
        model = make_model(arm.model)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        draws = RandomSampler(shard, replacement=True, num_samples=arm.local_steps * arm.batch_size,
                              generator=torch.Generator().manual_seed(seed * 10**9 + server_round * 10**5 + client))
        optimizer = torch.optim.SGD(model.parameters(), lr=arm.learning_rate)
        model.train()
        for rows in DataLoader(shard, batch_size=arm.batch_size, sampler=draws):
            optimizer.zero_grad()
            F.cross_entropy(model(images[rows]), labels[rows]).backward()
            optimizer.step()
        metrics = MetricRecord({"num-examples": arm.local_steps * arm.batch_size})  # equal for all: equal weights
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)

    return app


def run(arm, dataset_path: str, shards_path: str, seed: int, clock) -> dict:
    torch.manual_seed(seed)
    with np.load(dataset_path) as arrays:
        test_images, test_labels = arrays["x_test"], arrays["y_test"]
    server, found = ServerApp(), {}

    def evaluate(server_round: int, arrays: ArrayRecord):  # called before the first round and after each one
        if server_round == 0:
            clock.mark("train_start")
        else:
            clock.round_end()
        if server_round == arm.rounds:
            clock.mark("eval_start")
            model = make_model(arm.model)
            model.load_state_dict(arrays.to_torch_state_dict())
            found["accuracy"] = accuracy(model, test_images, test_labels)
            clock.mark("eval_end")

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=arm.participants / arm.num_clients, fraction_evaluate=0.0,
                          min_train_nodes=arm.participants, min_available_nodes=arm.num_clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(make_model(arm.model).state_dict()),
                       num_rounds=arm.rounds, evaluate_fn=evaluate)

    run_simulation(server_app=server, client_app=client_app(arm, dataset_path, shards_path, seed),
                   num_supernodes=arm.num_clients)
    if "accuracy" not in found:
        raise RuntimeError("the Flower simulation ended before its last round (its log is above)")
    return {"accuracy": found["accuracy"]}
