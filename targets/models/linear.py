"""Linear victims: multinomial logistic regression and the sketching paper's linear regression."""

from __future__ import annotations

import math

from torch import nn


class LogReg(nn.Module):
    """softmax(W x + c), trained with cross-entropy."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        super().__init__()
        self.fc = nn.Linear(math.prod(in_shape), num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class LinReg(nn.Module):
    """w^T x with no bias; its loss is F(w, x) = 1/2 (w^T x - y)^2 with a real target y (the class index as a
    number)."""

    def __init__(self, in_shape=(3, 32, 32), num_classes=10):
        super().__init__()
        self.fc = nn.Linear(math.prod(in_shape), 1, bias=False)

    def forward(self, x):
        return self.fc(x.flatten(1)).squeeze(-1)
