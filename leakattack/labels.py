"""Label recovery from a true or sketched gradient.

iDLG (Zhao et al., 2020): with cross-entropy and non-negative features h (sigmoid
or ReLU), the gradient of the head's weight row c is (p_c - 1[c = y]) h, so the
row of the true label has a negative sum and every other row a positive one.

Through a sketch the attacker does not see g but y = R g.  The row sum is the
inner product <m_c, g> with m_c the indicator of row c, and R is a
coordinate-wise embedding (Song et al. 2023, Definition 4.1 / Lemma D.11):
E[<R m_c, R g>] = <m_c, g>, with variance O(||m_c||^2 ||g||^2 / b).  So the
attacker sketches each row indicator with the known R and reads the sign of
s_c = <R m_c, y>.  For the unsketched gradient this is exactly iDLG.  For a
batch of B images the B classes with the most negative scores are returned,
which assumes distinct labels in the batch (as in iDLG's batch extensions).
"""

from __future__ import annotations

import torch

import targets


def row_scores(model, sketch, y: torch.Tensor) -> torch.Tensor:
    """s_c = <R m_c, y> for each class c; the most negative marks the label."""
    head = model.head()
    slices = targets.param_slices(model)
    name = next(n for n, p in model.named_parameters() if p is head.weight)
    start = slices[name].start
    C, h = head.weight.shape
    masks = torch.zeros(C, sketch.d, dtype=y.dtype, device=y.device)
    for c in range(C):
        masks[c, start + c * h: start + (c + 1) * h] = 1.0
    return sketch.apply(masks) @ y


def recover_labels(model, sketch, y: torch.Tensor, batch_size: int) -> torch.Tensor:
    """iDLG's sign rule read through the sketch: the ``batch_size`` most negative rows."""
    scores = row_scores(model, sketch, y)
    return torch.argsort(scores)[:batch_size].sort().values.to(torch.long)
