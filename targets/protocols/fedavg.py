"""FedAvg (McMahan et al. 2017): K local SGD steps, the server averages dw weighted by the clients' examples."""

from __future__ import annotations

import torch

from .base import Protocol


class FedAvg(Protocol):
    """McMahan et al. 2017: K local SGD steps, the server averages dw weighted by the examples each client trained
    on (Algorithm 1: w^{t+1} = sum_k n_k / n w^k_{t+1})."""

    sends_whole_update = True

    def examples(self, c: int) -> int:
        """n_c: the examples client c trains on in a round, its whole shard with ``local_epochs``, else its batch
        (B images of its shard, fewer where the shard is smaller)."""
        n = self.shards[c].numel()
        return n if self.local_epochs else min(self.batch_size, n)

    def server(self, w, t, deltas: dict, messages: dict) -> torch.Tensor:
        counts = {c: self.examples(c) for c in messages}
        if len(set(counts.values())) == 1:  # equal counts: the plain mean, the same numbers to the last bit
            return super().server(w, t, deltas, messages)
        total = sum(counts.values())
        mean = sum(m * (counts[c] / total) for c, m in messages.items())
        return w + self.global_lr * mean
