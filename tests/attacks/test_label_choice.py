"""``--labels idlg`` reads two label rules and lets the attack's own loss choose where they differ.

On a trained model the head's gradient for a confidently classified image is small, and through a small sketch
the ``pooled`` count rule falls back on the model's probes (the class it gives random inputs), while the ``sign``
rule still reads the one negative row.  A short run of the attack with each reading tells them apart: a wrong
label changes the gradient of every layer.  The sign rule is read only where its premise holds (non-negative head
inputs).
"""

from __future__ import annotations

import json

import pytest
import torch

import leakattack.attacks.gradient_matching as gm
from leakattack.attacks.gradient_matching import LABEL_PROBE_STEPS
from leakattack.attacks.labels import COMPARED_RULES, readings_to_compare, recover_labels_by_rule
from leakattack.cli import main
from leakattack.cli.run import label_choice_line
from leakattack.config import RunConfig
from leakattack.data import get_dataset
from leakattack.experiment import prepare
from leakattack.progress import FORCE_ENV


@pytest.fixture(scope="module")
def trained_lenet(tmp_path_factory) -> str:
    """LeNet trained to a small loss on 128 digits (120 full-batch Adam steps, seconds), saved as --weights."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        victim = prepare(RunConfig(model="lenet", dataset="digits", threads=1)).obs.victim
        data = get_dataset("digits")
        X, Y = data.images[:128].to(victim.dtype), data.labels[:128]
        opt = torch.optim.Adam(victim.model.parameters(), 1e-2)
        for _ in range(120):
            opt.zero_grad()
            loss = victim.loss(victim.model(X), Y)
            loss.backward()
            opt.step()
        assert loss.item() < 0.2  # confident on its training digits (0.02 measured)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("weights") / "lenet_digits.pt"
    torch.save(victim.model.state_dict(), path)
    return str(path)


def _prepared(weights: str | None, index: int, ratio: float):
    extra = {"weights": weights} if weights else {}
    return prepare(RunConfig(model="lenet", dataset="digits", sketch="srht", sketch_ratio=ratio, image_index=index,
                             threads=1, iterations=600, **extra))


def test_agreeing_rules_run_no_probe():
    p = _prepared(None, 0, 0.5)
    readings = recover_labels_by_rule(p.obs.victim, p.obs.linear_map, p.obs.y, 1, rules=("pooled", "sign"))
    assert readings["pooled"].tolist() == readings["sign"].tolist()
    labels, choice = p.attack.choose_labels(p.obs)
    assert choice is None and labels.tolist() == readings["pooled"].tolist()


def test_the_attack_loss_picks_the_label_where_the_rules_differ(trained_lenet):
    differ = 0
    for index in (1, 3, 4, 5):
        p = _prepared(trained_lenet, index, 0.02)
        labels, choice = p.attack.choose_labels(p.obs)
        if choice is None:
            continue
        differ += 1
        assert set(choice["readings"]) == set(COMPARED_RULES)  # sigmoid features: every premise holds
        assert choice["probe_steps"] == LABEL_PROBE_STEPS and len(choice["probe_steps_run"]) == len(
            choice["probe_losses"]) and all(0 < n <= LABEL_PROBE_STEPS for n in choice["probe_steps_run"])
        assert labels.tolist() == p.labels.tolist() == choice["chosen"]
        chosen, other = sorted(choice["probe_losses"])[:2]
        assert chosen < 0.5 * other  # measured: at most 0.09 of the other (2.4e-6 to 0.0076 against 0.0019 to 0.30)
    assert differ >= 2  # measured: the rules differ on all four (pooled reads one class for every digit)


def test_each_label_reading_run_has_its_own_progress_bar(trained_lenet, monkeypatch, capsys):
    monkeypatch.setenv(FORCE_ENV, "1")
    p = _prepared(trained_lenet, 3, 0.02)
    p.attack.iterations = 40  # probes of 10 steps
    labels, choice = p.attack.choose_labels(p.obs, progress=True)
    err = capsys.readouterr().err
    n = len({tuple(v) for v in choice["readings"].values()})
    assert n >= 2 and all(f"label reading {i}/{n}" in err for i in range(1, n + 1))
    p.attack.choose_labels(p.obs)
    assert "label reading" not in capsys.readouterr().err  # no bar unless asked for


def test_run_records_and_reports_the_choice(trained_lenet, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--model", "lenet", "--dataset", "digits", "--weights", trained_lenet, "--sketch", "srht",
                 "--sketch-ratio", "0.02", "--image-index", "3", "--iterations", "300", "--threads", "1", "--quiet",
                 "--no-lpips", "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["label_acc"] == 1.0
    assert m["label_choice"]["chosen"] == m["labels_true"]
    assert "labels: the rules read different labels" in capsys.readouterr().err
    untouched = tmp_path / "plain"
    assert main(["run", "--model", "lenet", "--dataset", "digits", "--iterations", "5", "--quiet", "--no-lpips",
                 "--out", str(untouched)]) == 0
    assert "label_choice" not in json.loads((untouched / "metrics.json").read_text())


def test_the_row_sum_rules_are_read_only_where_the_head_inputs_are_non_negative():
    lenet = _prepared(None, 0, 0.5)  # sigmoid features
    assert set(readings_to_compare(lenet.obs.victim, lenet.obs.linear_map, lenet.obs.y, 1)) == \
        {"pooled", "sign", "llg", "llg-star"}
    vit = prepare(RunConfig(model="vit_small", sketch="srht", sketch_ratio=0.5, threads=1))  # a LayerNorm output
    assert set(readings_to_compare(vit.obs.victim, vit.obs.linear_map, vit.obs.y, 1)) == {"pooled", "magnitude"}
    labels, choice = vit.attack.choose_labels(vit.obs)
    assert choice is None and labels.tolist() == vit.labels.tolist()


def test_the_label_line_says_how_many_steps_each_reading_ran():
    from leakattack.cli.run import label_choice_line

    c = {"readings": {"pooled": [3], "sign": [0]}, "probe_steps": 150, "probe_losses": [0.2, 0.01],
         "chosen": [0], "probe_steps_run": [150, 150]}
    assert "a 150-step run with each matched the message best with [0]" in label_choice_line(c)
    c["probe_steps_run"] = [41, 38]  # their shares of a time limit ran out
    assert "a run of at most 150 steps with each (41, 38 steps run) matched" in label_choice_line(c)
    c.update(probe_steps_run=[41, 6], compared_at=6, probe_compared=[0.5, 0.3])  # compared where both had been
    assert ("(41, 6 steps run), compared after 6 steps, matched the message best with [0] (loss 0.3 against 0.5)"
            in label_choice_line(c))
    c.update(probe_steps_run=[0, 0], compared_at=0, probe_compared=[0.9, 0.8])
    assert ("; the short runs that compare them took no step within their shares of the time limit, so [0], the "
            "reading of the most rules, was kept" in label_choice_line(c))
    nonfinite = {**c, "probe_losses": [None, None]}  # a message of NaN: no step anywhere, and no time limit
    assert ("; the short runs that compare them found no finite objective to step on (a message of NaN or infinite "
            "values), so [0], the reading of the most rules, was kept" in label_choice_line(nonfinite))
    assert "found no finite objective" in label_choice_line({**c, "probe_losses": [float("nan"), float("inf")]})
    c.update(probe_steps_run=[0, 36], compared_at=0, probe_compared=[0.9, 0.8])  # one run only: said so
    assert ("; 1 of the 2 short runs that compare them took no step (0, 36 steps run) within their shares of the time "
            "limit, so [0]" in label_choice_line(c))
    # a run that met the tolerance at its start (a message of zeros) decides: the time limit and the rules' votes
    # were named where there was no time limit and the chosen reading was one rule's
    met = {**c, "readings": {"pooled": [0], "sign": [9], "llg": [9]}, "probe_steps": 2, "probe_steps_run": [0, 1],
           "probe_losses": [0.0, 2.01], "probe_compared": [0.0, 2.01], "matched": 1, "probe_time_limit": False}
    said = label_choice_line(met)
    assert said.endswith("; of a run of at most 2 steps with each (0, 1 steps run), only the run with [0] matched "
                         "the message to the attack's tolerance, so it was kept"), said
    idle = {**c, "probe_time_limit": False}  # no time limit: a run that took no step stopped at its first
    assert ("; 1 of the 2 short runs that compare them took no step (0, 36 steps run), so [0], the reading of the "
            "most rules, was kept" in label_choice_line(idle))
    for key in ("probe_steps_run", "compared_at", "probe_compared"):  # a run folder written before they were
        del c[key]
    assert "a 150-step run with each" in label_choice_line(c)


def test_label_runs_that_took_no_step_within_a_time_limit_keep_the_reading_of_the_most_rules(monkeypatch):
    """Runs of 0 steps compare nothing but their starts: the majority of the rules decides instead."""
    p = prepare(RunConfig(model="lenet", dataset="digits", batch_size=4, image_index=4, sketch="none", threads=1,
                          iterations=600))
    readings = {"pooled": torch.tensor([0, 1, 1, 2]), "sign": torch.tensor([4, 5, 6, 7]),
                "llg": torch.tensor([4, 5, 6, 7]), "llg-star": torch.tensor([4, 5, 6, 7])}
    monkeypatch.setattr(gm, "readings_to_compare", lambda *a, **k: readings)
    p.attack.time_limit = 1e-9  # every run's share ends before its first step
    labels, choice = p.attack.choose_labels(p.obs)
    assert choice["probe_steps_run"] == [0, 0] and choice["compared_at"] == 0
    assert labels.tolist() == [4, 5, 6, 7]


def test_a_label_runs_share_of_a_time_limit_times_its_steps_not_the_first_fit(monkeypatch):
    """The first run's first pass through the model (one-time costs) used up its share: it took no step, so no run was
    compared (a batch of 8 on resnet20 under 30-45 s). Each share now counts from its run's start fit."""
    import time

    p = prepare(RunConfig(model="lenet", dataset="digits", batch_size=4, image_index=4, sketch="none", threads=1,
                          iterations=600))
    readings = {"pooled": torch.tensor([0, 1, 1, 2]), "sign": torch.tensor([4, 5, 6, 7])}
    monkeypatch.setattr(gm, "readings_to_compare", lambda *a, **k: readings)
    evaluate, first = gm._Problem.evaluate, []

    def slow_first(self, *args, **kwargs):
        if not first:  # the first fit of the first run: longer than its whole share
            first.append(True)
            time.sleep(1.5)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(gm._Problem, "evaluate", slow_first)
    p.attack.time_limit = 8.0  # shares of 8 / (4 * 2) = 1 s
    labels, choice = p.attack.choose_labels(p.obs)
    assert min(choice["probe_steps_run"]) > 0 and choice["compared_at"] > 0, choice


def test_label_runs_that_match_the_message_equally_well_keep_the_reading_of_the_most_rules(capsys):
    """A message of one number (uniform sampling, b = 1) is matched to round-off by every reading: the pooled rule's
    [4], tried first, had won the tie against the [0] of three rules (the truth)."""
    p = prepare(RunConfig(model="lenet", sketch="uniform", sketch_dim=1, threads=1, iterations=20))
    labels, choice = p.attack.choose_labels(p.obs)
    assert choice["readings"]["pooled"] != choice["readings"]["sign"] == choice["readings"]["llg"]
    assert choice["tied"] == 2 and labels.tolist() == choice["readings"]["sign"] == p.labels.tolist()
    assert choice["matched"] == 2  # each run met the tolerance (4e-18)
    assert f"matched the message to the attack's tolerance with all 2 of them (an input with each of those readings " \
           f"sends it), so {labels.tolist()}, the reading of the most rules among those, was kept" in \
           label_choice_line(choice)


def test_label_runs_compared_at_a_step_within_round_off_are_tied():
    """Without the tolerance's word, runs whose losses at the compared step lie within LABEL_TIE of the best are
    tied, and the line says they matched equally well."""
    c = {"readings": {"pooled": [4], "sign": [0], "llg": [0], "llg-star": [0]}, "probe_steps": 10,
         "probe_steps_run": [10, 10], "probe_losses": [1e-6, 1e-6], "probe_compared": [1e-6, 1e-6],
         "compared_at": 10, "chosen": [0], "interrupted": False, "tied": 2}
    assert "matched the message equally well with 2 of them (loss 1e-06), so [0], the reading of the most rules " \
           "among those, was kept" in label_choice_line(c)


@pytest.mark.parametrize("batch", [2, 4])
def test_a_small_budgets_label_runs_take_enough_steps_to_tell_repeats(batch):
    """At --iterations 20 the runs took 5 steps and kept the sign rule's distinct reading of a batch of one class
    over the three rules that read it right."""
    p = prepare(RunConfig(model="logreg", dataset="digits", sketch="none", batch_size=batch, batch_draw="class",
                          image_index=3, threads=1, iterations=20))
    labels, choice = p.attack.choose_labels(p.obs)
    assert choice["probe_steps"] == 10
    assert labels.tolist() == p.labels.tolist() == [3] * batch


def test_label_runs_that_all_meet_the_tolerance_keep_the_reading_of_the_most_rules():
    """logreg through a gaussian sketch of b = 785 numbers for 8 digits of one class (6272 unknowns): every reading's
    run finds an input that sends the message, and the sign rule's eight distinct classes (1 of 8 right) had won by
    converging first (2.4e-9 against 2.1e-5 at step 16); pooled's reading is 5 of 8."""
    p = prepare(RunConfig(model="logreg", dataset="digits", sketch="gaussian", sketch_ratio=0.1, batch_size=8,
                          batch_draw="class", image_index=3, threads=1, iterations=300))
    labels, choice = p.attack.choose_labels(p.obs)
    assert choice["matched"] >= 2 and choice["chosen"] == labels.tolist()
    votes = {tuple(r): list(choice["readings"].values()).count(r) for r in choice["readings"].values()}
    assert votes[tuple(labels.tolist())] == max(votes.values())
    right = sum(min(labels.tolist().count(c), p.labels.tolist().count(c)) for c in set(p.labels.tolist()))
    assert right >= 4  # measured 5 of 8 (pooled); the sign rule reads 1 of 8
    line = label_choice_line(choice)
    assert "matched the message to the attack's tolerance with" in line and "compared after" not in line


def test_the_label_line_prints_the_compared_losses_with_the_digits_that_tell_them_apart():
    """Two losses of 1.0003 and 1.0011 were printed "(loss 1 against 1)": as many digits as read them apart."""
    from leakattack.rebuilt import label_choice_line

    c = {"readings": {"pooled": [4], "magnitude": [9]}, "probe_steps": 2, "probe_losses": [1.0011, 1.0003],
         "chosen": [9], "probe_steps_run": [2, 2]}
    assert label_choice_line(c).endswith("matched the message best with [9] (loss 1 against 1.001)")
