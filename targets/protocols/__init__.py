"""Federated protocols whose client messages are observed: ``get_protocol`` / ``list_protocols``.

* ``fedavg``            local SGD, K steps, plain averaging (McMahan et al. 2017).
* ``sketched``          Song et al. 2023, Algorithm 1 (sketched updates, R_t per round).
* ``sketched-dp``       Algorithm 2: Gaussian noise at every local step.
* ``fedsketch-privix``  FedSKETCH with the count-sketch table and PRIVIX.
* ``fedsketch-heaprix`` FedSKETCH with HEAPRIX (HEAVYMIX's top coordinates sent exactly).
* ``safl``              sketched adaptive FL: R_t dw, server de-sketches and runs Adam/AMSGrad/SGD(m).
* ``sacfl``             sketched adaptive clipped FL: R_t dw and ||dw||, server clips by the mean norm.
* ``compsgd``           Kasiviswanathan's COMPSGD: Phi_t g, step, projection onto Phi_t C and lift.
* ``privsgd``           COMPSGD with Gaussian noise in the projected space (PRIVSGD).

A protocol produces the message of client c in round t with
``Protocol.observe(w, t, c, ...)``.  Every protocol but compsgd/privsgd runs either K local
steps on one batch (``local_steps``) or E local epochs over the client's shard in mini-batches
(``local_epochs``).  Adding a protocol: its own module with a ``Protocol`` subclass, plus one
``register_protocol`` line here.
"""

from __future__ import annotations

from leakattack.errors import UserError
from leakattack.registry import Registry

from .base import (
    COMMON_SETTINGS,
    SPEC_DEFAULTS,
    UNKNOWN_SEED_OFFSET,
    ClientMessage,
    MessageMap,
    Protocol,
    epoch_schedule,
    evaluate,
    forward_seconds,
    local_sgd,
    minibatch,
    round_seed,
    split_clients,
    unread_settings,
)
from .compsgd import PROJECTION_BLOCKS, BlockProjection, CompSGD, layer_blocks, lift_l1, project_l1_ball
from .fedavg import FedAvg
from .fedsketch import CountSketchTable, FedSketchHeaprix, FedSketchPrivix, heavymix_support, median, privix
from .privsgd import PrivSGD, normalised_projection, privsgd_epsilon, privsgd_sigma
from .sacfl import SACFL, WithNorm, clip_factor, clip_record
from .safl import PAPER_SERVER_LR, SAFL, SECOND_MOMENTS, SERVER_OPTS, ada_opt, new_server_state
from .sketched import Sketched, SketchedDP, per_example_clipped_mean

_PROTOCOLS = Registry("protocol")


def register_protocol(name: str, cls: type[Protocol]) -> type[Protocol]:
    """Add a protocol class to the registry under ``name``; a name the command line cannot write or one taken, and
    anything but a :class:`Protocol` subclass (an instance, a function, another class: ``TypeError``), are refused
    in one sentence before anything is kept."""
    _PROTOCOLS.check_name(name)
    if name in _PROTOCOLS:  # the taken name's sentence first
        _PROTOCOLS.register(name, cls)
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise TypeError(f"protocol '{name}' must be a subclass of targets.protocols.Protocol, got "
                        f"{cls.__name__ if isinstance(cls, type) else type(cls).__name__} {cls!r:.60}")
    _PROTOCOLS.register(name, cls)
    cls.name = name
    return cls


register_protocol("fedavg", FedAvg)
register_protocol("sketched", Sketched)
register_protocol("sketched-dp", SketchedDP)
register_protocol("fedsketch-privix", FedSketchPrivix)
register_protocol("fedsketch-heaprix", FedSketchHeaprix)
register_protocol("safl", SAFL)
register_protocol("sacfl", SACFL)
register_protocol("compsgd", CompSGD)
register_protocol("privsgd", PrivSGD)


def list_protocols() -> list[str]:
    """Names accepted by :func:`get_protocol`."""
    return _PROTOCOLS.names()


def protocol_class(name: str) -> type[Protocol]:
    """The class registered under ``name`` (its capabilities without building it)."""
    return _PROTOCOLS.get(name)


def get_protocol(name: str, victim, train_set, *, defense=None, noise_rng=None, **spec) -> Protocol:
    """Build protocol ``name`` over ``victim`` (template) and the training ImageSet ``train_set``, with an optional
    defense on what its clients send and the generator of its noise (:class:`Protocol`)."""
    cls = _PROTOCOLS.get(name)
    unknown = set(spec) - set(SPEC_DEFAULTS)
    if unknown:
        raise UserError(f"unknown protocol parameter(s): {', '.join(sorted(unknown))}")
    return cls(victim, train_set, defense=defense, noise_rng=noise_rng, **{**SPEC_DEFAULTS, **spec})


def privacy_caveats(noise: dict, rounds) -> str:
    """What a DP protocol's ε over rounds 1..``rounds`` (its ``Protocol.privacy`` dict ``noise``) leaves out, for the
    words beside it: privsgd's ε at the sensitivity its rescaling guarantees (2L, ``epsilon_rdp_normalised``: the
    per-record ε assumes a rescale the data do not move), and rounds past those its noise was set for
    (``rounds_covered``), where no guarantee holds."""
    said = ""
    wide = noise.get("epsilon_rdp_normalised")
    if isinstance(wide, (int, float)) and not isinstance(wide, bool):
        said += (f"; ε {wide:.3g} at the rescaling's sensitivity 2L, which bounds the message (the ε before it is at "
                 "the per-record sensitivity, which the rescaling does not keep)")
    covered = noise.get("rounds_covered")
    if isinstance(covered, int) and isinstance(rounds, int) and rounds > covered:
        said += f"; its noise was set for rounds 1..{covered}, and past them no guarantee holds"
    return said


__all__ = [
    "privacy_caveats",
    "get_protocol", "list_protocols", "register_protocol", "protocol_class", "Protocol", "ClientMessage",
    "MessageMap", "SPEC_DEFAULTS", "COMMON_SETTINGS", "unread_settings",
    "UNKNOWN_SEED_OFFSET", "evaluate", "local_sgd", "round_seed", "split_clients",
    "epoch_schedule", "minibatch", "forward_seconds", "clip_record",
    "per_example_clipped_mean", "CountSketchTable", "privix", "heavymix_support", "median",
    "FedAvg", "Sketched", "SketchedDP", "FedSketchPrivix", "FedSketchHeaprix",
    "SAFL", "SACFL", "CompSGD", "PrivSGD", "SERVER_OPTS", "SECOND_MOMENTS", "PAPER_SERVER_LR", "PROJECTION_BLOCKS",
    "ada_opt", "new_server_state", "clip_factor", "WithNorm", "project_l1_ball", "lift_l1", "layer_blocks",
    "BlockProjection", "privsgd_sigma", "privsgd_epsilon", "normalised_projection",
]
