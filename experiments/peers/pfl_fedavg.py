"""FedAvg in pfl-research: ``FederatedAveraging`` on a ``SimulatedBackend`` (users one after another, in this
process) over a ``FederatedDataset`` whose users are the shards, a ``PyTorchModel`` with local SGD and central SGD at
rate 1, each user weighted equally (``WeightByUser``); the cohort is the algorithm's ``train_cohort_size``."""

import numpy as np
import torch
import torch.nn.functional as F
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByUser
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel

from .torch_models import make_model


class Classifier(torch.nn.Module):
    """The network with the ``loss`` and ``metrics`` pfl's PyTorchModel asks of it."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)

    def loss(self, x, y, eval=False):
        self.eval() if eval else self.train()
        return F.cross_entropy(self(x), y.long())

    @torch.no_grad()
    def metrics(self, x, y, eval=True):
        self.eval() if eval else self.train()
        logits = self(x)
        return {"loss": Weighted(F.cross_entropy(logits, y.long(), reduction="sum").item(), len(y)),
                "accuracy": Weighted((logits.argmax(1) == y).sum().item(), len(y))}


class Rounds(TrainingProcessCallback):
    """Stamps the start of training and the end of every central iteration on the benchmark's clock."""

    def __init__(self, clock):
        self.clock = clock

    def on_train_begin(self, *, model) -> Metrics:
        self.clock.mark("train_start")
        return Metrics()

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        self.clock.round_end()
        return False, Metrics()


def run(arm, dataset_path: str, shards_path: str, seed: int, clock) -> dict:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    with np.load(dataset_path) as arrays, np.load(shards_path) as shards:
        images, labels, indices, sizes = arrays["x_train"], arrays["y_train"], shards["indices"], shards["sizes"]
        test_images, test_labels = arrays["x_test"], arrays["y_test"]

    def make_dataset_fn(user):  # the user's data this round: its minibatches, drawn with replacement from its shard
        rows = indices[user, rng.integers(0, sizes[user], arm.local_steps * arm.batch_size)]
        return Dataset((images[rows], labels[rows]), user_id=str(user))

    users = get_user_sampler("minimize_reuse", rng.permutation(arm.num_clients).tolist())
    backend = SimulatedBackend(training_data=FederatedDataset(make_dataset_fn, users), val_data=None,
                               postprocessors=[WeightByUser()])
    net = Classifier(make_model(arm.model))
    model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), 1.0))
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=arm.rounds, evaluation_frequency=arm.rounds,
                                           train_cohort_size=arm.participants, val_cohort_size=0),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=arm.learning_rate, local_num_epochs=None,
                                              local_num_steps=arm.local_steps, local_batch_size=arm.batch_size),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000), callbacks=[Rounds(clock)])
    clock.mark("eval_start")
    metrics = model.evaluate(Dataset((test_images, test_labels)), eval_params=NNEvalHyperParams(local_batch_size=1000))
    clock.mark("eval_end")
    by_name = {name.lower(): value for name, value in metrics.to_simple_dict().items()}  # pfl capitalises names
    return {"accuracy": 100.0 * by_name["accuracy"]}
