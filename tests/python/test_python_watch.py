"""spikehunt.Watch: the monitor inside a training loop of the user's own. The
same loop as tests/python/tiny.py's scenario, written as a plain PyTorch loop,
gives the same trace as `tiny.py run`; a loop that blows up is non-finite with
its first non-finite tensor named; fail_fast raises at it."""
import collections.abc
import json
import os
import random
import sys
import weakref

import numpy
import pytest
import torch
import torch.nn.functional as F

import spikehunt
from conftest import read_json, tiny_run_trace, traces_equal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny  # noqa: E402


def tiny_loop(out, lr=0.1, steps=12, **watch):
    """tiny.py's scenario as a user's loop: the same seeds, model, optimizer and batches."""
    random.seed(0)
    numpy.random.seed(0)
    torch.manual_seed(0)
    net = tiny.Blobs(16)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    jitter = random.random() + numpy.random.rand()
    records = []
    with spikehunt.Watch(net, opt, out=str(out), num_classes=4, **watch) as w:
        for _ in range(steps):
            x, y = tiny.blobs(32, generator)
            loss = F.cross_entropy(net(x * (1 + 0.01 * jitter)), y)
            records.append(w.step(loss, x, y))
            if records[-1]["health"] == "non_finite":
                break
    return w, records


def test_a_loop_under_watch_writes_the_trace_the_scenario_writes_under_run(tmp_path):
    w, records = tiny_loop(tmp_path / "watch")
    assert [r["step"] for r in records] == list(range(12))
    assert all(r["health"] == "finite" for r in records)
    assert read_json(os.path.join(w.path, "verdict.json"))["outcome"] == "healthy"
    assert traces_equal(os.path.join(w.path, "trace.jsonl"), tiny_run_trace(tmp_path / "run")) == 12


def test_a_loop_that_blows_up_is_non_finite_naming_the_first_non_finite_tensor(tmp_path):
    w, records = tiny_loop(tmp_path, lr=4, steps=80, rules={"param_jump_limit": 1000})
    assert records[-1]["health"] == "non_finite"
    v = w.verdict()
    assert v["outcome"] == "non_finite" and v["onset_step"] < v["failure_step"]
    assert v["fault"]["stage"] == "forward" and v["fault"]["tensor"] in ("fc1", "act", "fc2"), v["fault"]
    assert sorted(os.listdir(w.path)) == ["first_bad.safetensors", "last_healthy.safetensors", "trace.jsonl",
                                          "verdict.json"]
    with pytest.raises(RuntimeError, match=r"the watch ended at step \d+ \(non_finite: (fc1|act|fc2) \(forward\): "
                                           r"\d+ (NaN|\+Inf|-Inf).*\), and takes no more steps; its results are in "):
        w.step(torch.tensor(1.0, requires_grad=True), torch.zeros(1, 8), torch.zeros(1, dtype=torch.long))


def test_fail_fast_raises_at_the_first_non_finite_tensor_naming_it_and_its_stage(tmp_path):
    with pytest.raises(spikehunt.NonFiniteError, match=r"^step \d+: (fc1|act|fc2) \(forward\): "):
        tiny_loop(tmp_path, lr=4, steps=80, fail_fast=True, rules={"param_jump_limit": 1000})
    folders = os.listdir(tmp_path)
    assert len(folders) == 1  # the watch closed and wrote what it saw
    assert read_json(os.path.join(tmp_path, folders[0], "verdict.json"))["steps_run"] > 0


def test_a_per_tensor_rule_judges_the_named_parameter_alone(tmp_path):
    # fc1.weight held to a jump of 1e-9 of its norm: extreme from the first step, and the hit names it;
    # fc2.weight keeps the model-wide 0.5.
    w, records = tiny_loop(tmp_path, rules={"layers": {"fc1.weight": {"param_jump_limit": 1e-9}}})
    assert records[0]["health"] == "extreme" and records[0]["rules"] == ["param_jump_limit"], records[0]
    hits = read_json(os.path.join(w.path, "verdict.json"))["onset_hits"]
    assert [(h["rule"], h["tensor"], h["threshold"]) for h in hits] == [("param_jump_limit", "fc1.weight", 1e-9)]


def test_a_tapped_activation_is_not_held_through_backward(tmp_path):
    """A tap the monitor has read is let go before backward, as a plain loop lets it go: held to
    the step's end, every step's activations would stay in memory through backward."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tapped, alive = {}, []
    model[0].register_forward_hook(lambda m, i, out: tapped.__setitem__("0", weakref.ref(out)))
    # The first layer's gradient comes last in backward: the tapped output (which autograd does
    # not save: ReLU keeps its own result) has no holder left by then.
    model[0].weight.register_hook(lambda g: alive.append(tapped["0"]() is not None))
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    with spikehunt.Watch(model, opt, out=str(tmp_path), taps=["0"]) as w:
        for _ in range(3):
            record = w.step(F.cross_entropy(model(x), y), x, y)
    assert record["health"] == "finite"
    assert alive == [False, False, False]


def test_a_bad_tap_name_is_a_contract_error_naming_the_submodules():
    net = tiny.Blobs(4)
    with pytest.raises(spikehunt.ContractError, match="'fc3'.*fc1"):
        spikehunt.Watch(net, torch.optim.SGD(net.parameters(), lr=0.1), taps=["fc3"])


def _last_healthy_of_a_blow_up_at_step_4(net, opt, out):
    """Trains tiny.Blobs under a Watch until step 4 puts +Inf into its first parameter; the
    checkpoint entering step 4, as a dict of tensors."""
    from safetensors.torch import load_file
    generator = torch.Generator().manual_seed(0)
    with spikehunt.Watch(net, opt, out=str(out), num_classes=4) as w:
        for step in range(6):
            if step == 4:
                with torch.no_grad():
                    next(net.parameters())[0, 0] = float("inf")
            x, y = tiny.blobs(32, generator)
            w.step(F.cross_entropy(net(x), y), x, y)
            if w.ended is not None:
                break
    assert w.ended["step"] == 4
    return load_file(os.path.join(w.path, "last_healthy.safetensors"))


@pytest.mark.parametrize("fused", [False, True])
def test_adamw_step_counts_kept_as_tensors_reach_the_checkpoint(tmp_path, fused):
    """torch.optim's AdamW keeps each parameter's step count as a tensor (on the parameter's
    device when fused); the watch reads it as a tensor (no host copy on a GPU) and the
    checkpoint entering the failure holds every parameter's count as an integer."""
    torch.manual_seed(0)
    net = tiny.Blobs(16)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=fused)
    saved = _last_healthy_of_a_blow_up_at_step_4(net, opt, tmp_path)
    steps = {k: v for k, v in saved.items() if k.endswith(".step")}
    assert sorted(steps) == sorted(f"optim.{name}.step" for name, _ in net.named_parameters())
    assert all(v.dtype == torch.int64 and int(v) == 4 for v in steps.values()), steps


class _StateMapping(collections.abc.MutableMapping):
    """An optimizer's `state` that is a mapping but not a dict (as a wrapping optimizer may keep it)."""
    asked = 0  # `in` asked of it: the monitor read it through Python's protocols

    def __init__(self):
        self._d = collections.defaultdict(dict)

    def __getitem__(self, key):
        return self._d[key]

    def __setitem__(self, key, value):
        self._d[key] = value

    def __delitem__(self, key):
        del self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)

    def __contains__(self, key):
        _StateMapping.asked += 1
        return key in self._d


def test_an_optimizer_state_that_is_not_a_dict_is_checkpointed_as_a_dict_one_is(tmp_path):
    """The monitor reads a torch.optim state (a dict of dicts) through the dicts themselves; a
    state of another mapping type goes through Python's protocols and gives the same checkpoint."""
    saved = []
    for kind, mapping in (("dict", None), ("mapping", _StateMapping)):
        torch.manual_seed(0)
        net = tiny.Blobs(16)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        if mapping is not None:
            opt.state = mapping()
        saved.append(_last_healthy_of_a_blow_up_at_step_4(net, opt, tmp_path / kind))
    buffers = sorted(k for k in saved[0] if k.endswith(".momentum_buffer"))
    assert buffers == sorted(f"optim.{name}.momentum_buffer" for name, _ in tiny.Blobs(16).named_parameters())
    assert sorted(saved[1]) == sorted(saved[0])
    assert all(torch.equal(saved[0][k], saved[1][k]) for k in saved[0])
    assert _StateMapping.asked > 0


@pytest.mark.parametrize("unwatched_every", [0, 3])
def test_the_last_healthy_checkpoint_is_the_state_entering_the_onset_step_bit_for_bit(tmp_path, unwatched_every):
    """The watch copies the state after each step as it reads it, for the next step's entering
    state; a loop that changes the state between watched steps (unwatched optimizer steps, an
    in-place edit) makes that copy stale, and the checkpoint must still be the state entering
    the onset step, as the loop holds it there."""
    from safetensors.torch import load_file
    torch.manual_seed(0)
    net = tiny.Blobs(16)
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    generator = torch.Generator().manual_seed(0)
    entering = {}
    with spikehunt.Watch(net, opt, out=str(tmp_path), num_classes=4, rules={"param_jump_limit": 1000}) as w:
        for step in range(200):
            x, y = tiny.blobs(32, generator)
            if unwatched_every and step % unwatched_every == 1:
                opt.zero_grad()
                F.cross_entropy(net(x), y).backward()
                opt.step()
            if step == 7:
                with torch.no_grad():
                    net.fc1.weight.mul_(8.0)  # an edit between steps: the onset comes soon after
            entering[w._core.next_step] = {f"model.{k}": v.detach().clone() for k, v in net.named_parameters()}
            entering[w._core.next_step].update({f"optim.{k}.momentum_buffer": opt.state[p]["momentum_buffer"].clone()
                                                for k, p in net.named_parameters() if p in opt.state})
            w.step(F.cross_entropy(net(x), y), x, y)
            if w.ended is not None:
                break
    onset = w.verdict()["onset_step"]
    assert onset is not None and onset >= 7, w.verdict()
    saved = load_file(os.path.join(w.path, "last_healthy.safetensors"))
    want = entering[onset]
    assert sorted(k for k in saved if not k.endswith(".step") and k != "rng.cpu") == sorted(want)
    for k, v in want.items():
        assert torch.equal(saved[k], v), k
