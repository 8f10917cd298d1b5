"""What the report's run and sweep sections share: the notes they print, the threat model's words, and the
HTML and number formatting of its cells and figures."""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

from defenses import DefenseError
from defenses import build as build_defense
from targets.protocols import list_protocols, protocol_class

from ...attacks import attack_class, list_attacks
from ...attacks.recipes import defense_prunes
from ...errors import UserError
from ...results import is_number
from ..common import fixed, to_hwc

#: what a reconstruction that is not rebuilt means, said wherever one is reported
FAILURE_NOTE = "a failure of this attack, not evidence of privacy"
NOT_RECORDED = "not recorded"
NOT_A_BOUND_MARK = "†"
#: the legend of the mark
NOT_A_BOUND_NOTE = (f"{NOT_A_BOUND_MARK} not a DP bound: the paper's ε, √K·ε̂ over K steps (Lemma H.7, then Theorem "
                    "6.2), is a guarantee only where ε̂ < 1/√K, that is where it is below 1 (docs/defenses.md, "
                    "Accounting).")
#: how a score against the truth that is not finite reads (a run stores it as null: leakattack.jsonable)
NOT_A_NUMBER = "not a number"
#: the label modes of the threat model, in words
LABELS = {"given": "labels given to the attacker",
          "idlg": "labels read from the message (the count and sign rules, docs/attacks/labels.md)",
          "dlg": "labels optimised with the images (DLG)"}


def _protocol_class(name):
    """The registered protocol class of ``name``, or None (no protocol, or one not registered in this process)."""
    return protocol_class(name) if isinstance(name, str) and name in list_protocols() else None


def _dp_protocol(name) -> bool:
    """Whether ``name`` is a registered protocol that adds its own noise and states its ε (it reads dp_epsilon)."""
    cls = _protocol_class(name)
    return cls is not None and "dp_epsilon" in cls.reads


def _paper_rule(protocol, stem: str = "epsilon_paper") -> str | None:
    """When a point's paper ε (``stem``: epsilon_paper, utility_epsilon_paper) is no DP bound: ``"below one"``
    (Lemma H.7's, a defense's, and a DP protocol's whose class says so), ``"never"`` (a DP protocol's whose formula
    bounds none of its messages: ``Protocol.paper_epsilon_unguaranteed``), None (another DP protocol's formula, with
    no such condition).  A defense's ε under a protocol without noise of its own, and the training's, are the
    defense's; a protocol not registered in this process is read by Lemma H.7's rule."""
    if stem != "epsilon_paper" or not _dp_protocol(protocol):
        return "below one"
    cls = _protocol_class(protocol)
    if cls.paper_epsilon_unguaranteed:
        return "never"
    return "below one" if cls.paper_epsilon_below_one else None


def _attack_class(name):
    """The registered attack class of ``name``, or None (an attack not registered in this process)."""
    return attack_class(name) if name in list_attacks() else None


#: the openings of the threat model's words about the sketch (:func:`_threat`)
_SKETCH_WORDS = ("sketch seed", "seed searched")


def _threat(run: dict, sketch: str) -> str:
    words = [LABELS.get(run.get("label_mode", ""), f"label mode {run.get('label_mode', NOT_RECORDED)}")]
    cls = _attack_class(run.get("attack"))
    if cls is not None and cls.modifies_model:
        words.insert(0, "a malicious server: it changed the model it sent before the client computed its gradient")
    if sketch != "none":
        bits = run.get("sketch_seed_search")
        if run.get("sketch_known", True):
            words.append("sketch seed known")
        elif not bits:
            words.append("sketch seed not known (the attacker draws R from another seed)")
        else:  # the attack ran with the seed the search found (the run's section says which)
            words.append("sketch seed not known")
        if bits:
            words.append(f"seed searched among {2 ** int(bits)} candidates ({bits} bits)")
    if _clips(run.get("defense")):
        words.append("clip threshold known" if run.get("attacker_knows_clip") else "clip threshold not known")
    if defense_prunes(run.get("defense")):
        words.append("pruning known" if run.get("attacker_knows_prune") is True else "pruning not known")
    return "; ".join(words)


def _clips(defense) -> bool:
    """Whether a stored defense holds a norm clip (``clip``, ``per_example``): what ``attacker_knows_clip`` is about."""
    return _clips_spec(defense if isinstance(defense, str) else json.dumps(defense))


@functools.lru_cache(maxsize=256)
def _clips_spec(spec: str) -> bool:
    """:func:`_clips` of one spec, as text (a sweep's points share a handful)."""
    try:
        return bool(build_defense(json.loads(spec) if spec.startswith(("[", "{")) else spec).clips().steps)
    except (DefenseError, ValueError):  # a spec this version does not know: read its words
        return "clip" in spec or "per_example" in spec


def _machine_text(env: dict) -> str:
    """The CPU, its SIMD capability, the threads and the device of an environment record."""
    mach = env.get("machine") or {}
    cpu = mach.get("cpu") or env.get("device_name") or NOT_RECORDED
    bits = [cpu]
    if mach.get("cpu_capability"):
        bits.append(f"SIMD {mach['cpu_capability']}")
    if mach.get("threads", env.get("threads")) is not None:
        bits.append(f"{mach.get('threads', env.get('threads'))} thread(s)")
    return ", ".join(bits) + (f" ({env['device']})" if env.get("device") else "")


def _cell(text):
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        return text
    return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v


# -------------------------------------------------------------------- helpers

def image_png(x) -> tuple[bytes, tuple[int, int]]:
    """A (C, H, W) image in [0, 1] (tensor or array) as PNG bytes, and its (H, W)."""
    a = to_hwc(x)
    u8 = np.round(a * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(u8, mode="L" if u8.ndim == 2 else "RGB").save(buf, format="PNG")
    return buf.getvalue(), u8.shape[:2]


def shown_width(w: int) -> int:
    """CSS pixels an image of width ``w`` is shown at in the grid: small images enlarged by a whole factor to about
    96 px (blocky pixels, no blur), larger ones at their size up to 128 px."""
    return w * max(1, 96 // w) if w <= 48 else min(w, 128)


def _uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _figure(path: Path, caption: str, width: int | None = None) -> str:
    size = ""
    try:
        with Image.open(path) as im:
            w, h = im.size
            im.load()  # the whole image: a file cut short has an intact header and shows as a blank box
        shown = min(w, width or 1000)
        size = f' width="{shown}" height="{round(shown * h / w)}"'
    except OSError:
        raise UserError(f"'{path}' is not a readable PNG image") from None
    return (f'<figure><img src="{_uri(path.read_bytes())}"{size} alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _heading(name) -> str:
    """A column heading that may wrap after each underscore (``b_over_m``) as well as at its spaces."""
    return _e(name).replace("_", "_<wbr>")


def _kv(rows) -> str:
    return '<table class="kv">' + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _name(folder: Path) -> str:
    return Path(folder).resolve().name or str(folder)


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _score(v, digits: int, scored: bool = True) -> str:
    """A score against the truth: null (how a run stores one that is not finite) reads "not a number" where the
    score was taken (``scored``), else "–"."""
    return NOT_A_NUMBER if v is None and scored else _num(v, digits)


def _or(words: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" or {words[-1]}"


def _num(v, digits: int = 2, kind: str = "f") -> str:
    if not is_number(v):
        return "–" if v is None else _e(v)
    return fixed(v, f".{digits}{kind}") if math.isfinite(v) else NOT_A_NUMBER


def _percent(share: float) -> str:
    """A share as a percentage: whole where it is one (``75%``), else to a tenth (``12.5%``, not ``12%``); a share
    short of all or above none never reads 100% or 0% (``99.9%``, ``0.1%``)."""
    pct = share * 100
    if abs(pct - round(pct)) < 1e-9:
        return _num(pct, 0) + "%"
    return _num(min(max(pct, 0.1), 99.9), 1) + "%"


def _int(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ("–" if v is None else str(v))


def _seconds(v) -> str:
    if not isinstance(v, (int, float)):
        return NOT_RECORDED
    if v < 0.05:  # 0.0 s would read as no time at all
        return "under 0.1 s"
    return f"{v:.1f} s" if v < 120 else f"{v / 60:.1f} min"
