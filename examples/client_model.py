"""The model of examples/capture_client.py: a small sigmoid CNN a federated client might train.

`leakattack run --model examples/client_model.py:ClientNet` builds the same class
(with in_shape and num_classes from the message file), so the attacker's model is
the client's own.
"""

import math

from torch import nn


class ClientNet(nn.Module):
    """Three 5x5 convolutions (12 channels; strides 2, 2, 1) with sigmoid activations, then one linear layer.

    ``init="dlg"`` draws every weight and bias from U(-0.5, 0.5), as Zhu et al.
    ("Deep Leakage from Gradients", 2019) do; ``"default"`` keeps PyTorch's own
    initialisation.  The draw uses PyTorch's global generator: seed it first.
    """

    def __init__(self, in_shape=(3, 32, 32), num_classes=10, init="dlg"):
        super().__init__()
        c, h, w = in_shape
        self.features = nn.Sequential(
            nn.Conv2d(c, 12, 5, padding=2, stride=2), nn.Sigmoid(),
            nn.Conv2d(12, 12, 5, padding=2, stride=2), nn.Sigmoid(),
            nn.Conv2d(12, 12, 5, padding=2, stride=1), nn.Sigmoid(),
        )
        self.classifier = nn.Linear(12 * math.ceil(h / 4) * math.ceil(w / 4), num_classes)
        if init == "dlg":
            for p in self.parameters():
                nn.init.uniform_(p, -0.5, 0.5)
        elif init != "default":
            raise ValueError(f"init must be 'dlg' or 'default', got {init!r}")

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))
