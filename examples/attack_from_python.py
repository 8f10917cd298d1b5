"""Attack one sketched gradient from Python: victim, channel, observation, attack, and its verdict.

Run from anywhere:  python examples/attack_from_python.py [iterations]
"""

import argparse

import torch

import targets
from leakattack import Channel, ThreatModel, assess, get_attack, get_batch, get_dataset, get_sketch, observe
from leakattack.script import count, script_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("iterations", nargs="?", type=count, default=6000, help="attack steps (default 6000, the CLI's)")
    iterations = ap.parse_args().iterations
    torch.set_num_threads(1)

    # the client: the DLG LeNet at seeded weights, one embedded photo, an SRHT sketch with b = d/2
    images = get_dataset("photos")
    x, labels = get_batch(images, 0)
    x = x.to(torch.float64)
    victim = targets.get_model("lenet", num_classes=images.num_classes, in_shape=images.in_shape, seed=0)
    victim.to(dtype=torch.float64)
    channel = Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1), defense="")

    # what the attacker sees (weights and sketch seed; labels are recovered from the message)
    obs = observe(victim, x, labels, channel, ThreatModel(knows_labels=False))
    # init_seed=2: the dummy start `leakattack run --seed 0` uses (model seed 0, sketch seed 1, dummy seed 2)
    result = get_attack("gradient-matching", iterations=iterations, init_seed=2).reconstruct(obs)

    # the scores beside the two baselines that need no message (the attack's start, the data set's mean image)
    s = assess(result, x, labels, dataset=images, with_lpips=False)
    print(f"{s['verdict']}: PSNR {s['psnr']:.2f} dB, SSIM {s['ssim']:.4f} against {s['baseline_psnr']:.2f} dB, "
          f"{s['baseline_ssim']:.4f} for the better baseline | label accuracy {s['label_acc']:.0f} | "
          f"L_R {result.final_loss:.3e} after {result.iterations} iterations")
    if s["verdict"] == "not rebuilt":
        print("a failure of this attack at this budget, not evidence that the message is private")


if __name__ == "__main__":
    script_main(main)  # bad input ends in one sentence and exit status 2
