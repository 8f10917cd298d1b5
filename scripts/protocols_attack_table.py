"""Attack table of results/protocols/: PSNR/SSIM of inverting one client message per setting.

python scripts/protocols_attack_table.py [ITERATIONS [PROTOCOL ...]]
Writes results/protocols/attacks.md and attacks.json of the repository it is in, from any
working folder.  Each row is one `leakattack run --protocol ...` (same RunConfig);
grad_rel_err = ||g(x^) - g(x)|| / ||g(x)|| with g the client's true, unsketched gradient at
w^t (Kasiviswanathan's footnote 4 says g cannot be recovered from its projection).  Naming
protocols re-runs only their rows and keeps the stored rows of the others (e.g.
`python scripts/protocols_attack_table.py 1000 safl sacfl`); a name that no row attacks is refused
before anything runs or is written.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch

import targets
from leakattack import experiment
from leakattack.config import RunConfig
from leakattack.results import atomic_write_text, write_json
from leakattack.script import count, one_of, script_main
from leakattack.training import stored_protocol, train
from targets.protocols import list_protocols

HERE = Path("results/protocols")
_args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_args.add_argument("iterations", nargs="?", type=count, default=1000, help="attack iterations per row (default 1000)")
_args.add_argument("protocols", nargs="*", type=one_of(list_protocols, "protocol"),
                   help="re-run only these protocols' rows (default: all)")
_a = _args.parse_args()
os.chdir(Path(__file__).resolve().parents[1])  # the repository's results/, whatever the working folder
ITER = _a.iterations
ONLY = set(_a.protocols)  #: protocols whose rows are re-run (empty: all)
BASE = dict(model="lenet", dataset="digits", batch_size=1, iterations=ITER, label_mode="idlg", seed=0,
            protocol_round=1, protocol_client=0)

ROWS = [("fedavg", "-", {"protocol": "fedavg"})]
for K in (1, 2, 5):
    for known in (True, False):
        ROWS.append((f"sketched srht b/d=0.5 K={K}", "known" if known else "unknown",
                     {"protocol": "sketched", "sketch": "srht", "sketch_ratio": 0.5,
                      "protocol_spec": {"local_steps": K}, "sketch_known": known}))
for t_, m_ in ((20, 40), (50, 100)):
    for space in ("sketch", "unsketched"):
        for known in (True, False):
            ROWS.append((f"fedsketch-privix ({t_}, {m_}) match {space}", "known" if known else "unknown",
                         {"protocol": "fedsketch-privix", "match_space": space, "sketch_known": known,
                          "protocol_spec": {"sketch_rows": t_, "sketch_buckets": m_}}))
ROWS.append(("sketched-dp srht b/d=0.5 K=1 (eps^=0.5, C=1)", "known",
             {"protocol": "sketched-dp", "sketch": "srht", "sketch_ratio": 0.5}))
# SAFL / SACFL: the same R_t and update at round 1 (w^1, seeds shared), so sacfl - safl is what the norm adds;
# b/d = 0.01 is the smallest ratio of the SAFL paper's CIFAR-10 runs (b = 4e5 of d = 4.2e7), 0.1 its largest
for ratio in (0.1, 0.01):
    for proto in ("safl", "sacfl"):
        for known in (True, False):
            ROWS.append((f"{proto} srht b/d={ratio} K=1", "known" if known else "unknown",
                         {"protocol": proto, "sketch": "srht", "sketch_ratio": ratio, "sketch_known": known}))
ROWS.append(("safl srht b/d=0.1 K=5", "known",
             {"protocol": "safl", "sketch": "srht", "sketch_ratio": 0.1, "protocol_spec": {"local_steps": 5}}))
# COMPSGD / PRIVSGD: Phi_t g of one step; m_i = d_i/10 per layer is the paper's MLP setting
for kind in ("gaussian", "sparse"):
    for known in ((True, False) if kind == "gaussian" else (True,)):
        ROWS.append((f"compsgd {kind} m_i=d_i/10 per layer", "known" if known else "unknown",
                     {"protocol": "compsgd", "sketch": kind, "sketch_ratio": 0.1, "sketch_known": known}))
ROWS.append(("compsgd gaussian m=d/10 global", "known",
             {"protocol": "compsgd", "sketch": "gaussian", "sketch_ratio": 0.1,
              "protocol_spec": {"projection_blocks": "global"}}))
ROWS.append(("compsgd gaussian m_i=d_i/100 per layer", "known",
             {"protocol": "compsgd", "sketch": "gaussian", "sketch_ratio": 0.01}))
for eps in (0.5, 100.0, 1e8):
    ROWS.append((f"privsgd gaussian m_i=d_i/10 (eps={eps:g} over T=100, L=1)", "known",
                 {"protocol": "privsgd", "sketch": "gaussian", "sketch_ratio": 0.1,
                  "protocol_spec": {"dp_epsilon": eps}}))
TRAINED = {"protocol": "sketched", "protocol_dir": "results/protocols/train/sketched-srht-0.1"}
ROWS.append(("sketched srht b/d=0.1 K=1, round 1 of the trained run", "known", {**TRAINED, "protocol_round": 1}))
# round 500: p_y ~ 1, the label's weight row drowns in the sketch noise (label SNR < 1); `given` shows the image part
for mode, obj in (("idlg", "l2"), ("given", "l2"), ("given", "cosine")):
    ROWS.append((f"sketched srht b/d=0.1 K=1, round 500 of the trained run, labels {mode}, {obj}", "known",
                 {**TRAINED, "protocol_round": 500, "label_mode": mode, "objective": obj}))
_rowless = sorted(ONLY - {kw["protocol"] for _, _, kw in ROWS})
if _rowless:  # a protocol of leakattack's that no row attacks: nothing to re-run, before anything is written
    _args.error(f"no row attacks protocol {', '.join(_rowless)}; the rows attack "
                f"{', '.join(dict.fromkeys(kw['protocol'] for _, _, kw in ROWS))}")


def with_checkpoints(kw):
    """Checkpoints are not committed: retrain the stored run up to the round (digits, ~25 s) into results/runs/."""
    src = Path(kw["protocol_dir"])
    if (src / "checkpoints" / f"round_{kw['protocol_round']:04d}.pt").exists():
        return kw
    protocol = json.loads((src / "protocol.json").read_text())["protocol"]
    spec, model, _ = stored_protocol(src, protocol)
    cache = Path("results/runs/protocol-checkpoints")
    if not (cache / src.name / "checkpoints" / f"round_{kw['protocol_round']:04d}.pt").exists():
        last = max(k["protocol_round"] for _, _, k in ROWS if k.get("protocol_dir") == kw["protocol_dir"])
        train(protocol, spec, model, last, cache, src.name, progress=False)
    return {**kw, "protocol_dir": str(cache / src.name)}


NOTE = """L_R/‖y‖² is the matched objective at the best iterate (cosine rows: 1 − cos).  Label SNR: the gap
between the two lowest iDLG scores over the sketch noise ‖M m_c‖‖y‖√(1/b − 1/d) (labels.sign_rule_snr;
∞ unsketched); below ~2 the weight-row sign rule alone guesses.  The attack's labels come from the pooled
rule (labels.py), which also reads the head's bias gradient p_c − 1[c = y], weighted against its own
sketch noise.  Round 500 of the trained run: p_y ≈ 0.999, the label's weight row (p_y − 1)Σh = 1.2e-2
against sketch noise ≈ 2e-2 at b = 1343 (SNR 0.4), yet the pooled rule reads the right label (9) on this
image, and the attack then rebuilds it as well as with the label given; the sign rule alone (and LLG)
reads 2 on this message (`recover_labels(..., rule="sign")`), and with a wrong label no image matches the
message.  With the label given the image is recovered (L-BFGS in units of ‖y‖; unnormalised it
stalled at L_R/‖y‖² = 3e-4, 16 dB: torch keeps curvature pairs only if sᵀy > 1e-10).
At b = 134 (b/d = 0.01, m_i = d_i/100) the message has fewer numbers than the image (784 pixels): the attack
matches it to L_R/‖y‖² ~ 1e-10 with another image (7 dB), so the message does not determine x.  safl and
sacfl send the same R_t Δw at round 1; sacfl adds ‖Δw‖, which moves no row by more than 2.5 dB.  privsgd:
sigma = 12 (eps = 0.5) and 0.06 (eps = 100) per coordinate against ‖s_t Φ_t g‖ ≤ L = 1 spread over 1342
coordinates; eps = 1e8 is the same message without effective noise."""


def main():
    torch.set_num_threads(1)
    out = []
    stored = {}
    if ONLY and (HERE / "attacks.json").exists():
        stored = {(r["setting"], r["sketch seed"]): r for r in json.loads((HERE / "attacks.json").read_text())}
        for r in stored.values():  # JSON has no infinity: an unsketched message's label SNR is stored as null
            r["label_snr"] = float("inf") if r["label_snr"] is None else r["label_snr"]
    for name, seed_known, kw in ROWS:
        if ONLY and kw["protocol"] not in ONLY:
            if (name, seed_known) in stored:
                out.append(stored[(name, seed_known)])
            continue
        if kw.get("protocol_dir") and not Path(kw["protocol_dir"], "protocol.json").exists():
            continue
        if kw.get("protocol_dir"):
            kw = with_checkpoints(kw)
        cfg = RunConfig(**{**BASE, **kw})
        t0 = time.perf_counter()
        p = experiment.prepare(cfg)
        o = experiment.execute(p, with_lpips=False)
        xh = o.result.x.clamp(0, 1)
        lab = o.result.labels
        g = targets.flat_gradient(p.victim, p.x, p.labels)
        gh = targets.flat_gradient(p.victim, xh, lab)
        rel = float((gh - g).norm() / g.norm())
        row = {"setting": name, "sketch seed": seed_known, "message floats": p.obs.b, "d": p.obs.d,
               "psnr": o.metrics.psnr, "ssim": o.metrics.ssim, "label_acc": o.metrics.label_acc,
               "grad_rel_err": rel, "iterations": o.metrics.iterations, "wall_s": time.perf_counter() - t0,
               "labels": f"{lab.tolist()[0]}/{p.labels.tolist()[0]}", "label_mode": cfg.label_mode,
               "label_snr": p.obs.extra["label_snr"], "rel_L_R": o.metrics.final_loss}
        print(json.dumps(row), flush=True)
        out.append(row)
    write_json(HERE / "attacks.json", out)
    lines = ["| setting | sketch seed | floats sent | PSNR (dB) | SSIM | label (attack/true) | label SNR | "
             "L_R/‖y‖² | ‖g(x̂)−g‖/‖g‖ | wall (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out:
        lab = r["labels"] + (" (given)" if r["label_mode"] == "given" else "")
        lines.append(f"| {r['setting']} | {r['sketch seed']} | {r['message floats']} | {r['psnr']:.1f} | "
                     f"{r['ssim']:.3f} | {lab} | {r['label_snr']:.1f} | {r['rel_L_R']:.1e} | "
                     f"{r['grad_rel_err']:.1e} | {r['wall_s']:.0f} |")
    lines += ["", NOTE]
    atomic_write_text(HERE / "attacks.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    script_main(main)
