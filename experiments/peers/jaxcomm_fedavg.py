"""FedAvg in jaxcomm, as a researcher writes it: full participation is local SGD with plain averaging
(``local_sgd.make_local_sgd``: H = 5 local plain-SGD steps, then outer SGD at rate 1 on the mean of the clients'
moves) run by ``methods.train``; a cohort of K of M clients per round is ``jaxcomm.federated.fedavg``
(:func:`cohort_fedavg`). jaxcomm draws its own shards from the seed (``data.partition``), the ones the run's .npz
holds: the peers read them there."""

import flax.linen as nn
import numpy as np
import optax

from jaxcomm import data, kit, local_sgd, methods, models


class SimpleCNN(nn.Module):
    """pfl-research's CIFAR-10 ``simple_cnn``: two 3x3 convolutions (32, 64), 2x2 max pool, dropout 0.25, Dense 128,
    dropout 0.5, Dense 10."""

    @nn.compact
    def __call__(self, x, *, train: bool = False):
        h = nn.relu(nn.Conv(64, (3, 3), padding="VALID")(nn.relu(nn.Conv(32, (3, 3), padding="VALID")(x))))
        h = nn.Dropout(0.25, deterministic=not train)(nn.max_pool(h, (2, 2), strides=(2, 2)))
        h = nn.relu(nn.Dense(128)(h.reshape(x.shape[0], -1)))
        return nn.Dense(10)(nn.Dropout(0.5, deterministic=not train)(h)), h


def model_of(name: str) -> nn.Module:
    return models.MLP(hidden=(64,)) if name == "mlp" else SimpleCNN()


def fedavg(arm) -> methods.Method:
    """Every client every round: H local SGD steps from the global model, then the equal-weight average."""
    def build(config, model, *, image_shape, num_classes):
        return local_sgd.make_local_sgd(config, model, image_shape=image_shape, num_classes=num_classes,
                                        sync_every=arm.local_steps, outer=local_sgd.local_sgd_outer(),
                                        inner=optax.sgd(arm.learning_rate))

    return methods.Method("fedavg", build, family="local_sgd", score="model")


def cohort_fedavg(arm) -> methods.Method | None:
    """A cohort of K of the M clients per round (``jaxcomm.federated``, the cohort API); None where this jaxcomm has
    no such module."""
    try:
        from jaxcomm import federated
    except ImportError:
        return None
    return federated.fedavg(arm.local_steps, cohort=arm.cohort, client_optimizer=optax.sgd(arm.learning_rate),
                            weighting="uniform")


def run(arm, dataset_path: str, shards_path: str, seed: int, clock) -> dict:
    method = fedavg(arm) if arm.cohort is None else cohort_fedavg(arm)
    if method is None:
        return {"unavailable": "not available in this jaxcomm (no jaxcomm.federated, the cohort API)"}
    with np.load(dataset_path) as arrays:
        train, test = (data.ImageSplit(arrays[f"x_{s}"], arrays[f"y_{s}"]) for s in ("train", "test"))
    none = data.ImageSplit(train.images[:0], train.labels[:0])
    dataset = data.ImageDataset(arm.dataset, train, none, test, 10)
    steps = arm.local_steps * arm.rounds  # one evaluation, at the end
    config = kit.RunConfig(num_nodes=arm.num_clients, batch_size=arm.batch_size, num_steps=steps, eval_every=steps,
                           seed=seed)
    clock.mark("train_start")
    result = methods.train(method, config, model_of(arm.model), dataset, progress=False)
    clock.mark("train_end")
    return {"accuracy": result["final"]["avg_accuracy"], "train_seconds": result["train_seconds"],
            "final_seconds": result["final"]["seconds"], "backend": result["built"].backend,
            "step_loop": result["built"].step_loop}
