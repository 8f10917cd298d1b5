"""leakattack: how much private data leaks from true and sketched FL gradients.

One attack is one trip through the stations: data -> targets (Victim) -> channel
(defenses + sketch) -> observation -> attack -> metrics -> results -> figures.
From Python (one embedded photo, the DLG LeNet, an SRHT sketch with b = d/2)::

    import torch

    import targets
    from leakattack import Channel, ThreatModel, assess, get_attack, get_batch, get_dataset, get_sketch, observe

    images = get_dataset("photos")
    x, labels = get_batch(images, 0)
    x = x.to(torch.float64)
    victim = targets.get_model("lenet", in_shape=(3, 32, 32), num_classes=10).to(dtype=torch.float64)
    channel = Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1))
    obs = observe(victim, x, labels, channel, ThreatModel())
    result = get_attack("gradient-matching", iterations=500).reconstruct(obs)
    judged = assess(result, x, labels, dataset=images, with_lpips=False)
    print(judged["verdict"], judged["psnr"], judged["baseline_psnr"])

:func:`assess` scores the reconstruction beside its baselines (the attack's start,
the data set's mean image) and says ``rebuilt`` or ``not rebuilt``, as a run's
metrics.json does; :func:`score` gives the scores alone.

``run_attack(RunConfig(...))`` does the same from a configuration and writes a
run folder, as ``leakattack run`` does; it returns the run's metrics (a
:class:`leakattack.metrics.RunMetrics`) and the folder.
"""

__version__ = "0.1.0"

import importlib as _importlib

#: the library entry points, resolved on first use: importing a leaf module
#: (leakattack.sketch, leakattack.registry) from targets or defenses must not pull
#: in the whole pipeline that imports them back
_EXPORTS = {
    "AttackResult": "attacks", "get_attack": "attacks", "list_attacks": "attacks",
    "Channel": "channel", "RunConfig": "config",
    "get_batch": "data", "get_dataset": "data", "list_datasets": "data",
    "run_attack": "experiment", "score": "metrics", "assess": "metrics",
    "Observation": "observation", "ThreatModel": "observation", "observe": "observation",
    "get_sketch": "sketch", "list_sketches": "sketch", "make_sketch": "sketch",
}


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(_importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'leakattack' has no attribute '{name}'")


def __dir__():
    """The entry points with what the module holds (its loaded submodules), which ``dir`` and tab completion list
    though they are resolved on first use."""
    return sorted({*globals(), *_EXPORTS})


__all__ = ["__version__", *_EXPORTS]
