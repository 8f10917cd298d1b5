"""leakattack: how much private data leaks from true and sketched FL gradients.

The flow is data -> targets -> defenses -> observation -> attack -> metrics ->
results/figures (see README).  The public entry points are the CLI
(``leakattack run``) and :func:`leakattack.experiment.run_attack`.
"""

__version__ = "0.1.0"
