"""--threads auto: every core for deep victims, one thread for small ones, in the CLI and the Python API alike; a
given count always wins."""

import torch

import targets
from leakattack import Channel, ThreatModel, get_attack, get_sketch, observe
from leakattack.config import RunConfig
from leakattack.config.constraints import available_cores
from leakattack.config.params import DEEP_WEIGHTS
from leakattack.config.params import PARALLEL_EXAMPLES as HELP_PARALLEL_EXAMPLES
from leakattack.experiment import execute, prepare
from targets.victim import DEEP_WEIGHTS as VICTIM_DEEP_WEIGHTS
from targets.victim import PARALLEL_EXAMPLES, cpu_cores


def test_the_help_texts_copy_of_the_bound_and_the_core_count_are_the_victims():
    assert DEEP_WEIGHTS == VICTIM_DEEP_WEIGHTS and cpu_cores() == available_cores()
    assert HELP_PARALLEL_EXAMPLES == PARALLEL_EXAMPLES


def test_a_victim_chooses_every_core_from_the_bound_on_and_one_thread_below():
    small = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    deep = targets.get_model("resnet20", seed=0)
    assert small.d < DEEP_WEIGHTS <= deep.d
    assert small.threads == 1 and deep.threads == available_cores()


def test_prepare_sets_the_victims_count_unless_one_is_given():
    before = torch.get_num_threads()
    try:
        assert RunConfig().threads is None
        prepare(RunConfig(model="lenet", dataset="digits", iterations=1))
        assert torch.get_num_threads() == 1
        prepare(RunConfig(model="resnet20", sketch="none", iterations=1))
        assert torch.get_num_threads() == available_cores()
        prepare(RunConfig(model="resnet20", sketch="none", iterations=1, threads=1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def _seen(attack, obs):
    """The thread count torch had while the attack ran (read by its monitor)."""
    seen = []
    attack.reconstruct(obs, monitor=lambda step, x: seen.append(torch.get_num_threads()) or {})
    return set(seen)


def test_the_python_apis_attack_runs_on_the_victims_count_or_the_given_one_and_restores_torchs():
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    x, labels = torch.rand(1, 1, 8, 8), torch.tensor([3])
    obs = observe(victim, x, labels, Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1)), ThreatModel())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(available_cores())
        assert _seen(get_attack("gradient-matching", iterations=3), obs) == {1}
        assert torch.get_num_threads() == available_cores()
        assert _seen(get_attack("gradient-matching", iterations=3, threads=available_cores()), obs) == \
            {available_cores()}
    finally:
        torch.set_num_threads(before)


def test_batches_of_starts_and_examples_of_a_small_victim_run_on_every_core():
    victim = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    assert victim.threads_for(PARALLEL_EXAMPLES - 1) == 1 and victim.threads_for(PARALLEL_EXAMPLES) == available_cores()
    B = 2
    x, labels = torch.rand(B, 1, 8, 8), torch.tensor([3, 5])
    obs = observe(victim, x, labels, Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1)), ThreatModel())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        many = PARALLEL_EXAMPLES // B  # starts: R*B images an evaluation
        assert _seen(get_attack("gradient-matching", iterations=3, restarts=many), obs) == {available_cores()}
        assert _seen(get_attack("gradient-matching", iterations=3, restarts=1), obs) == \
            ({1} if B < PARALLEL_EXAMPLES else {available_cores()})
        assert _seen(get_attack("gradient-matching", iterations=3, restarts=many, threads=1), obs) == {1}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_an_explicit_count_reaches_the_attack_through_a_run():
    before = torch.get_num_threads()
    try:
        p = prepare(RunConfig(model="lenet", dataset="digits", iterations=2, threads=available_cores()))
        assert p.attack.threads == available_cores()
        assert prepare(RunConfig(model="lenet", dataset="digits", iterations=2)).attack.threads is None
        execute(p, with_lpips=False)
    finally:
        torch.set_num_threads(before)


def test_a_float32_attack_on_one_image_of_a_small_victim_runs_its_convolutions_without_onednn():
    from leakattack.attacks.gradient_matching import own_convolutions

    def setting(victim, R=1, B=1, **options):
        x = torch.rand(B, *victim.input_shape, dtype=victim.dtype)
        obs = observe(victim, x, torch.arange(B) % 10, Channel(get_sketch("srht", victim.d, victim.d // 2, seed=1)),
                      ThreatModel())
        x0 = torch.rand(R, B, *victim.input_shape, dtype=victim.dtype)
        seen = []
        get_attack("gradient-matching", optimizer="adam", iterations=2, restarts=R, **options).optimise(
            obs, x0, obs.labels, monitor=lambda step, x: seen.append(torch.backends.mkldnn.enabled) or {},
            monitor_every=1)
        assert len(set(seen)) == 1 and seen[0] == (not own_convolutions(obs, x0))
        return seen[0]

    small = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    before = torch.backends.mkldnn.enabled
    assert setting(small) is False  # float32, one image, d below the bound: PyTorch's own kernels
    assert torch.backends.mkldnn.enabled == before  # given back afterwards
    assert setting(small, R=2) is True and setting(small, B=2) is True  # batched: oneDNN
    assert setting(targets.get_model("lenet", in_shape=(1, 8, 8), seed=0).to(dtype=torch.float64)) is True
    assert setting(targets.get_model("resnet20", seed=0)) is True  # deep: oneDNN


def test_config_json_records_the_threads_the_attack_ran_on(tmp_path):
    """--threads auto on a batch of 4 images of LeNet ran the attack on every core, and config.json recorded the one
    thread the run held before it."""
    import json

    from leakattack import cli

    small = targets.get_model("lenet", in_shape=(1, 8, 8), seed=0)
    for batch in (1, 4):
        out = tmp_path / f"b{batch}"
        assert cli.main(["run", "--model", "lenet", "--dataset", "digits", "--batch-size", str(batch),
                         "--iterations", "2", "--quiet", "--no-lpips", "--out", str(out)]) == 0
        env = json.loads((out / "config.json").read_text())["environment"]
        assert env["threads"] == env["machine"]["threads"] == small.threads_for(batch), env
