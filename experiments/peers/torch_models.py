"""The PyTorch models both peers train (Flower's and pfl-research's workloads), initialised as Flax initialises
jaxcomm's: the same architectures, the same initial distribution, the same inputs (uint8 images to [0, 1])."""

import torch
from torch import nn


class UnitFloat(nn.Module):
    """uint8 images ``[B, H, W, C]`` -> float ``[B, C, H, W]`` in [0, 1] (jaxcomm's ``models.to_unit_float``)."""

    def forward(self, x):
        return x.permute(0, 3, 1, 2).float() / 255.0


def lecun_normal_(net: nn.Module) -> nn.Module:
    """flax.linen's default initialisation: weights from a normal truncated at 2 sd, variance 1 / fan_in; biases 0."""
    for layer in net.modules():
        if isinstance(layer, nn.Linear | nn.Conv2d):
            std = layer.weight[0].numel() ** -0.5 / 0.87962566103423978  # the sd of N(0, 1) truncated at +-2
            nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(layer.bias)
    return net


def make_model(name: str) -> nn.Module:
    """"mlp": 784-64-10 (ReLU; jaxcomm's ``MLP(hidden=(64,))``); "cnn": pfl-research's ``simple_cnn`` for 32x32x3."""
    if name == "mlp":
        net = nn.Sequential(UnitFloat(), nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    else:
        net = nn.Sequential(UnitFloat(), nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                            nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(14 * 14 * 64, 128), nn.ReLU(),
                            nn.Dropout(0.5), nn.Linear(128, 10))
    return lecun_normal_(net)


@torch.no_grad()
def accuracy(model: nn.Module, images, labels, batch_size: int = 1000) -> float:
    """Test accuracy (%) of ``model`` on uint8 ``images [M, H, W, C]`` and ``labels [M]`` (numpy arrays)."""
    model.eval()
    correct = 0
    for start in range(0, len(labels), batch_size):
        x = torch.from_numpy(images[start:start + batch_size])
        y = torch.from_numpy(labels[start:start + batch_size]).long()
        correct += (model(x).argmax(1) == y).sum().item()
    return 100.0 * correct / len(labels)
