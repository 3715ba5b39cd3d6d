"""`spikehunt run -- COMMAND`: a plain PyTorch script, unmodified, under the monitor
(python/spikehunt/_command.py, _attach.py; docs/commands.md). The scripts in examples/commands
know nothing of spikehunt: argparse knobs, their own loop, zero_grad/backward/step."""
import glob
import json
import os
import sys

import pytest

from conftest import SOURCE, read_json, read_jsonl, spikehunt

MLP = ["examples/commands/train_mlp.py"]
GAN = ["examples/commands/train_gan.py"]


def run(out, *command, flags=()):
    return spikehunt("run", "--out", str(out), *flags, "--", sys.executable, *command, script=["-m", "spikehunt"])


def folders(out):
    return sorted(os.path.dirname(v) for v in glob.glob(os.path.join(str(out), "**", "verdict.json"), recursive=True))


def test_a_healthy_script_is_watched_step_by_step_and_two_runs_are_bit_identical(tmp_path):
    rc, out, err = run(tmp_path / "a", *MLP, "--batch-size", "64")
    assert rc == 0, out + err
    assert "epoch 2: mean loss" in out, "the script's own output passes through"
    [folder] = folders(tmp_path / "a")
    verdict = read_json(os.path.join(folder, "verdict.json"))
    assert verdict["outcome"] == "healthy" and verdict["steps_run"] == 3 * 1024 // 64, verdict
    trace = read_jsonl(os.path.join(folder, "trace.jsonl"))
    assert len(trace) == 48 and trace[0]["label_histogram"] and len(trace[0]["label_histogram"]) == 8, trace[0]
    # The Linear layers are tapped; each ReLU only bounds the tap before it (|relu(x)| <= max|x|).
    assert set(trace[0]["activations"]) == {"0", "2", "4"}, "the model's leaves are the taps"
    # Same command, same seed: the same hashes and losses, step by step.
    rc, out, err = run(tmp_path / "b", *MLP, "--batch-size", "64")
    [again] = folders(tmp_path / "b")
    assert read_json(os.path.join(again, "verdict.json"))["hash_chain"] == verdict["hash_chain"]
    assert [t["loss"] for t in read_jsonl(os.path.join(again, "trace.jsonl"))] == [t["loss"] for t in trace]


RESIDUAL = """
import torch, torch.nn as nn
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.relu_a, self.pool = nn.Linear(8, 8), nn.ReLU(), nn.AdaptiveMaxPool1d(4)
        self.b, self.relu_b = nn.Linear(4, 4), nn.ReLU()
        self.c, self.steep = nn.Linear(4, 4), nn.LeakyReLU(2.0)
    def forward(self, x):
        x = self.pool(self.relu_a(self.a(x)))  # each bounded by the tap before: a's
        y = self.b(x)
        y += x  # in place after b's tap: relu_b reads a larger tensor than b's tap saw
        return self.steep(self.c(self.relu_b(y)))
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(16, 2, 8)).pow(2).mean().backward()
    opt.step()
"""


def test_a_leaf_is_left_untapped_only_where_the_tap_before_it_bounds_its_output(tmp_path):
    script = tmp_path / "residual.py"
    script.write_text(RESIDUAL)
    rc, out, err = run(tmp_path / "out", str(script))
    assert rc == 0, out + err
    [folder] = folders(tmp_path / "out")
    taps = set(read_jsonl(os.path.join(folder, "trace.jsonl"))[0]["activations"])
    # relu_a follows a's tap untouched, pool follows relu_a; b's output changed in place before relu_b
    # read it, and a slope of 2 can double c's max.
    assert taps == {"a", "b", "relu_b", "c", "steep"}, taps


def test_an_unstable_setting_ends_at_its_first_non_finite_step_with_the_onset_before_it(tmp_path):
    rc, out, err = run(tmp_path, *MLP, "--lr", "3", "--epochs", "50")
    assert rc == 1, out + err
    [folder] = folders(tmp_path)
    v = read_json(os.path.join(folder, "verdict.json"))
    assert v["outcome"] == "non_finite" and v["onset_step"] < v["failure_step"], v
    assert v["steps_run"] == v["failure_step"] + 1, "the script ends at the burst's end, not after 50 epochs"
    assert "epoch 49" not in out
    assert os.path.exists(os.path.join(folder, "last_healthy.safetensors"))


def test_steps_ends_the_script_cleanly_after_n_optimizer_steps(tmp_path):
    rc, out, err = run(tmp_path, *MLP, flags=["--steps", "7"])
    assert rc == 0, out + err
    assert "epoch 0" not in out and "--steps 7: the burst's steps are done" in out
    [folder] = folders(tmp_path)
    assert len(read_jsonl(os.path.join(folder, "trace.jsonl"))) == 7


def test_gradient_accumulation_is_one_step_of_several_backwards_and_a_skipped_amp_step_is_said(tmp_path):
    rc, out, err = run(tmp_path / "acc", *MLP, "--accumulate", "4", "--epochs", "1")
    assert rc == 0, out + err
    [folder] = folders(tmp_path / "acc")
    assert read_json(os.path.join(folder, "verdict.json"))["steps_run"] == 1024 // 32 // 4
    rc, out, err = run(tmp_path / "amp", *MLP, "--amp", "--overflow-at", "3", "--epochs", "1")
    assert rc == 0, out + err  # the scaler's skip is what a GradScaler is for: not a failure
    assert "skipped    step 3 of optimizer 0: the GradScaler found inf/NaN gradients" in out
    [folder] = folders(tmp_path / "amp")
    v = read_json(os.path.join(folder, "verdict.json"))
    assert v["outcome"] == "healthy" and v["steps_run"] == 1024 // 32 - 1, v


def test_each_optimizer_of_a_gan_is_watched_on_the_model_it_steps(tmp_path):
    rc, out, err = run(tmp_path, *GAN, "--steps", "30")
    assert rc == 0, out + err
    assert "optimizer 0 (SGD on Sequential)" in out and "optimizer 1 (Adam on Sequential)" in out
    found = folders(tmp_path)
    assert len(found) == 2 and any("optimizer1-Adam" in f for f in found), found
    for f in found:
        trace = read_jsonl(os.path.join(f, "trace.jsonl"))
        assert len(trace) == 30
    generator = next(f for f in found if "optimizer1-Adam" in f)
    first = read_jsonl(os.path.join(generator, "trace.jsonl"))[0]
    assert [layer["name"] for layer in first["layers"]][:2] == ["0.weight", "0.bias"]
    assert first["input_max"] > 0, "the generator's step reads its own inputs (its latent batch)"


def test_a_script_that_raises_is_crashed_with_its_own_traceback(tmp_path):
    rc, out, err = run(tmp_path, *MLP, "--crash-at", "4")
    assert rc == 1, out + err
    assert "crashed    the command raised: ValueError: a batch this loop cannot handle at step 4" in err
    assert "examples/commands/train_mlp.py" in err and "in check" in err, "its last frame, the script's"
    [folder] = folders(tmp_path)
    v = read_json(os.path.join(folder, "verdict.json"))
    assert v["outcome"] == "crashed" and v["steps_run"] == 4 and "train_mlp.py" in v["message"], v


def test_commands_that_give_nothing_to_watch_are_bad_input_naming_why(tmp_path):
    rc, out, err = spikehunt("run", "--out", str(tmp_path), "--", sys.executable, "-c", "print('hello')",
                             script=["-m", "spikehunt"])
    assert rc == 2 and "no Python process of the command imported torch (exit 0)" in err and "| hello" in err, err
    rc, out, err = spikehunt("run", "--out", str(tmp_path), "--", sys.executable, "-c",
                             "import sys, torch; print(sys.stdin.read() == ''); sys.exit(3)", script=["-m", "spikehunt"])
    assert rc == 2 and "never took an optimizer step (exit 3)" in err and "| True" in err, err  # stdin: no hang
    rc, out, err = spikehunt("run", "--out", str(tmp_path), "--", "no-such-program-here", script=["-m", "spikehunt"])
    assert rc == 2 and "cannot start 'no-such-program-here'" in err, err
    for flags, says in [(["--steps", "0"], "--steps = '0'"), (["--stpes", "3"], "'--stpes' is not a flag"),
                        (["--rules", str(tmp_path / "none.json")], "cannot read the rules file")]:
        rc, out, err = spikehunt("run", *flags, "--", sys.executable, *MLP, script=["-m", "spikehunt"])
        assert rc == 2 and says in err, (flags, err)
    rc, out, err = spikehunt("run", "--", script=["-m", "spikehunt"])
    assert rc == 2 and "nothing after `--`" in err, err


def test_a_rules_file_sets_the_health_rules_of_the_watched_steps(tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text('{"health": {"loss_limit": 0.5}}')
    rc, out, err = run(tmp_path / "out", *MLP, flags=["--steps", "5", "--rules", str(rules)])
    assert rc == 1, out + err  # a cross-entropy of 8 classes starts near 2: above 0.5 is extreme
    [folder] = folders(tmp_path / "out")
    assert "loss_limit" in read_json(os.path.join(folder, "verdict.json"))["onset_rules"]


@pytest.mark.parametrize("verb", ["run", "sweep", "doctor"])
def test_the_binary_points_a_command_to_the_python_package(verb):
    import subprocess
    binary = os.path.join(os.environ.get("SPIKEHUNT_BUILD", "build"), "spikehunt")
    p = subprocess.run([binary, verb, "--", sys.executable, *MLP], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and f"python3 -m spikehunt {verb}" in p.stderr and "docs/commands.md" in p.stderr, \
        p.stderr


SWEEP = ["examples/commands/train_mlp.py", "--lr", "{lr}", "--momentum", "{momentum}", "--seed", "{seed}",
         "--epochs", "1"]


def test_a_sweep_over_a_commands_knobs_finds_shrinks_and_replays_its_unstable_region(tmp_path):
    rc, out, err = spikehunt("sweep", "--space", "examples/commands/space.json", "--runs", "8", "--out",
                             str(tmp_path), "--max-shrinks", "1", "--shrink-bursts", "12", "--no-progress",
                             "--no-repeat-check", "--", sys.executable, *SWEEP, script=["-m", "spikehunt"])
    assert rc == 1, out + err
    assert "1. non_finite:" in out and "params.lr=" in out, out  # the minimal config: the knob that matters
    assert "replay: reproduced: non_finite" in out, out
    [repro] = glob.glob(os.path.join(str(tmp_path), "repros", "non_finite*.repro.json"))
    r = read_json(repro)
    assert r["config"]["scenario"] == "command" and r["config"]["params"]["command"][-2:] == ["--epochs", "1"]
    assert r["config"]["params"]["lr"] >= 1, "an unstable learning rate"
    assert len(r["step_hashes"]) == r["verdict"]["steps_run"]
    rc, out, err = spikehunt("replay", repro, script=["-m", "spikehunt"])  # as its `replay it:` line says
    assert rc == 0 and "reproduced: non_finite" in out, out + err


def test_a_sweeps_knobs_must_match_the_spaces_dimensions(tmp_path):
    typo = [w.replace("{momentum}", "{momentun}") for w in SWEEP]
    rc, out, err = spikehunt("sweep", "--space", "examples/commands/space.json", "--out", str(tmp_path), "--",
                             sys.executable, *typo, script=["-m", "spikehunt"])
    assert rc == 2 and "{momentun} is not a dimension" in err and "did you mean {momentum}" in err, err
    unused = SWEEP[:5] + SWEEP[7:]  # --seed {seed} left out
    rc, out, err = spikehunt("sweep", "--space", "examples/commands/space.json", "--out", str(tmp_path), "--",
                             sys.executable, *unused, script=["-m", "spikehunt"])
    assert rc == 2 and "dimension 'seed' reaches no {seed} in the command" in err, err


def test_the_doctor_says_why_it_cannot_examine_a_command(tmp_path):
    config = tmp_path / "command.json"
    config.write_text('{"scenario": "command", "params": {"command": ["python3", "train.py"]}}')
    rc, out, err = spikehunt("doctor", "--config", str(config), script=["-m", "spikehunt"])
    assert rc == 2 and 'scenario = "command" is a training command run in a process of its own' in err, err
    assert "spikehunt doctor -- COMMAND" in err, err


def test_a_knob_reaches_the_script_through_its_environment(tmp_path):
    for lr, outcome, code in [(3.0, "non_finite", 1), (0.05, "healthy", 0)]:
        config = tmp_path / f"command-{lr}.json"
        config.write_text(json.dumps({"scenario": "command", "threads": 1, "params": {
            "command": [sys.executable, *MLP, "--epochs", "1"], "env": ["LR={lr}"], "lr": lr}}))
        rc, out, err = spikehunt("run", "--config", str(config), "--out", str(tmp_path / str(lr)),
                                 script=["-m", "spikehunt"])
        assert rc == code, out + err
        [folder] = folders(tmp_path / str(lr))
        assert read_json(os.path.join(folder, "verdict.json"))["outcome"] == outcome


def test_torchrun_ranks_are_one_global_step_written_by_rank_0(tmp_path):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    rc, out, err = spikehunt("run", "--out", str(tmp_path), "--", torchrun, "--nproc-per-node", "2",
                             "examples/commands/train_ddp.py", script=["-m", "spikehunt"])
    assert rc == 0, out + err
    assert "optimizer 0 (SGD on DistributedDataParallel)" in out
    [folder] = folders(tmp_path)
    trace = read_jsonl(os.path.join(folder, "trace.jsonl"))
    assert len(trace) == 30 and sum(trace[0]["label_histogram"]) == 64, "both ranks' 32 labels in each step"


def sweep_a_script(tmp_path, setup, flags, dimensions, rewrite=True):
    """A one-run sweep of a small linear model's script (`setup` seeds it or not and builds the optimizer
    `o` from the parsed flags `a`), the space's dimensions given: (exit code, stdout, stderr). With
    rewrite=False, the script and space as the last call wrote them, swept again into the same folder."""
    script = tmp_path / "train.py"
    if rewrite:
        script.write_text("import argparse, torch, torch.nn as nn, torch.nn.functional as F\n"
                          "p = argparse.ArgumentParser()\n"
                          + "".join(f"p.add_argument('--{f}', type=float)\n" for f in flags) +
                          "a = p.parse_args()\n" + setup +
                          "for i in range(5):\n"
                          "    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))\n"
                          "    o.zero_grad(); F.cross_entropy(m(x), y).backward(); o.step()\n")
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"dimensions": dimensions}))
    knobs = [w for f in flags for w in (f"--{f}", f"{{{f}}}")]
    return spikehunt("sweep", "--space", str(space), "--runs", "1", "--out", str(tmp_path / "out"), "--no-progress",
                     "--", sys.executable, str(script), *knobs, script=["-m", "spikehunt"])


def test_a_sweep_says_before_it_starts_that_a_script_is_not_repeatable(tmp_path):
    rc, out, err = sweep_a_script(tmp_path, "m = nn.Linear(4, 2); o = torch.optim.SGD(m.parameters(), lr=a.lr)\n",
                                  ["lr"], {"lr": {"log_range": [0.01, 1]}})  # no seed anywhere
    assert rc == 0, out + err
    assert "saw other data at step 0: input hash" in err and "its repros will not replay" in err, err


def test_a_compiled_model_is_watched_from_its_compiled_modules_call(tmp_path):
    rc, out, err = run(tmp_path, "examples/commands/train_compiled.py")
    assert rc == 0 and "done" in out, out + err
    assert "optimizer 0 (SGD on OptimizedModule)" in out and "the monitor stopped watching" not in err
    [folder] = folders(tmp_path)
    trace = read_jsonl(os.path.join(folder, "trace.jsonl"))
    assert len(trace) == 20 and trace[0]["input_max"] > 0 and sum(trace[0]["label_histogram"]) == 32


def test_a_sweep_says_which_knob_changes_nothing_in_the_script(tmp_path):
    rc, out, err = sweep_a_script(tmp_path, "torch.manual_seed(0); m = nn.Linear(4, 2)\n"
                                  "o = torch.optim.SGD(m.parameters(), lr=a.lr)  # a.momentum is never read\n",
                                  ["lr", "momentum"], {"lr": {"log_range": [0.01, 1]}, "momentum": {"range": [0, 0.9]}})
    assert rc == 0, out + err
    assert "knob {momentum}: 0 and 0.9 gave the same first 3 steps, bit for bit" in err, err
    assert "knob {lr}" not in err and "saw other data" not in err, err


def test_os_exit_still_commits_the_steps_and_a_killed_process_is_crashed(tmp_path):
    script = open(os.path.join(SOURCE, MLP[0])).read() + "\nimport os\nos._exit(0)  # as scripts do to skip teardown\n"
    rc, out, err = run(tmp_path / "exit", "-c", script, "--epochs", "1")
    assert rc == 0, out + err
    [folder] = folders(tmp_path / "exit")
    assert read_json(os.path.join(folder, "verdict.json"))["steps_run"] == 32
    rc, out, err = spikehunt("run", "--out", str(tmp_path / "kill"), "--", sys.executable, "-c",
                             "import os, signal, torch; os.kill(os.getpid(), signal.SIGKILL)", script=["-m", "spikehunt"])
    assert rc == 1 and "ended without its exit handlers (signal 9" in err, err


def test_a_commands_burst_runs_with_torchs_deterministic_kernels(tmp_path):
    script = ("import os, torch, torch.nn.functional as F\n"
              "assert torch.are_deterministic_algorithms_enabled(), 'not deterministic'\n"
              "assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'\n"
              "torch.manual_seed(0); m = torch.nn.Linear(4, 2); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
              "o.zero_grad(); F.cross_entropy(m(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward(); o.step()\n")
    config = tmp_path / "command.json"
    config.write_text(json.dumps({"scenario": "command", "params": {"command": [sys.executable, "-c", script]}}))
    rc, out, err = spikehunt("run", "--config", str(config), "--out", str(tmp_path / "out"), script=["-m", "spikehunt"])
    assert rc == 0, out + err  # a failed assertion in the script would be a crashed burst, exit 1
    [folder] = folders(tmp_path / "out")
    assert read_json(os.path.join(folder, "verdict.json"))["steps_run"] == 1


def test_a_replay_that_sees_other_data_says_whether_the_script_is_unrepeatable_or_changed(tmp_path):
    """replay runs a second replay to the step whose input hash differed: other data again means the
    script draws other data each run; the same data means what it reads changed since the recording."""
    script = tmp_path / "train.py"
    script.write_text("import os, torch, torch.nn as nn, torch.nn.functional as F\n"
                      "if os.environ.get('SEEDED'):\n    torch.manual_seed(0)\n"
                      "m = nn.Linear(4, 2); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for i in range(5):\n"
                      "    x, y = torch.randn(8, 4) + float(os.environ.get('SHIFT', 0)), torch.randint(0, 2, (8,))\n"
                      "    o.zero_grad(); F.cross_entropy(m(x), y).backward(); o.step()\n")
    config = tmp_path / "command.json"
    config.write_text(json.dumps({"scenario": "command", "params": {"command": [sys.executable, str(script)]}}))

    def record(out, env):
        rc, stdout, err = spikehunt("run", "--config", str(config), "--out", str(out), env=env,
                                    script=["-m", "spikehunt"])
        assert rc == 0, stdout + err
        return glob.glob(os.path.join(str(out), "*", "repro.json"))[0]

    unseeded = record(tmp_path / "a", {})
    rc, out, err = spikehunt("replay", unseeded, script=["-m", "spikehunt"])
    assert rc == 1 and "not reproduced: step 0: input hash expected" in out, out + err
    assert "a second replay drew other inputs again" in out and "does not draw the same data each run" in out, out
    seeded = record(tmp_path / "b", {"SEEDED": "1"})
    rc, out, err = spikehunt("replay", seeded, env={"SEEDED": "1", "SHIFT": "1"}, script=["-m", "spikehunt"])
    assert rc == 1 and "a second replay drew the same inputs as the first" in out and "changed since" in out, out
    rc, out, err = spikehunt("replay", seeded, env={"SEEDED": "1"}, script=["-m", "spikehunt"])
    assert rc == 0 and "reproduced: healthy" in out, out + err
    # The repro of one run of a command's config records its script as code: an edit is said at replay.
    assert str(script) in [f["path"] for f in read_json(seeded)["code"]], read_json(seeded)["code"]
    script.write_text(script.read_text() + "# edited\n")
    rc, out, err = spikehunt("replay", seeded, env={"SEEDED": "1"}, script=["-m", "spikehunt"])
    assert f"the code changed since the repro was recorded: {script}" in out + err, out + err


def test_a_local_module_the_script_imports_is_code_of_the_sweeps_build(tmp_path):
    """The preflight's runs read which modules of its own project the script imported: editing one of
    them between the start and the resume is a change of the code the sweep records."""
    (tmp_path / "helper.py").write_text("WIDTH = 2\n")
    rc, out, err = sweep_a_script(tmp_path, "import sys; sys.path.insert(0, %r); import helper\n"
                                  "torch.manual_seed(0); m = nn.Linear(4, helper.WIDTH)\n"
                                  "o = torch.optim.SGD(m.parameters(), lr=a.lr)\n" % str(tmp_path),
                                  ["lr"], {"lr": {"log_range": [0.01, 1]}})
    assert rc == 0, out + err
    files = read_json(str(tmp_path / "out" / "command-files.json"))
    assert sorted(os.path.basename(f) for f in files) == ["helper.py", "train.py"], files
    (tmp_path / "helper.py").write_text("WIDTH = 2  # edited\n")
    rc, out, err = sweep_a_script(tmp_path, "", ["lr"], {"lr": {"log_range": [0.01, 1]}}, rewrite=False)
    assert rc == 2 and "resuming would mix two versions of the code" in err, out + err


def test_guard_lr_sensitivity_and_a_sharded_sweep_with_its_merge_run_a_command(tmp_path):
    mlp = [sys.executable, os.path.join(SOURCE, MLP[0]), "--lr", "{optimizer.lr}", "--epochs", "1"]
    config = {"scenario": "command", "threads": 1, "params": {"command": mlp, "burst_steps": 8}}
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"configs": [{"name": "mlp", "config": config}]}))
    rc, out, err = spikehunt("guard", "record", "--suite", str(suite), "--out", str(tmp_path / "base.json"),
                             script=["-m", "spikehunt"])
    assert rc == 0 and "mlp: healthy, 8 steps" in out, out + err
    rc, out, err = spikehunt("guard", "check", "--suite", str(suite), "--baseline", str(tmp_path / "base.json"),
                             "--set", "optimizer.lr=3", script=["-m", "spikehunt"])
    assert rc == 1 and "mlp: REGRESSION" in out and "verdict: healthy →" in out, out + err
    # lr-sensitivity: a command has no held-out data, so its losses are the training loss, and said so.
    cfg = tmp_path / "command.json"
    cfg.write_text(json.dumps(config))
    rc, out, err = spikehunt("lr-sensitivity", "--config", str(cfg), "--lrs", "0.01,0.1", "--out",
                             str(tmp_path / "lrs"), script=["-m", "spikehunt"])
    assert rc == 0 and "losses: the training loss" in out, out + err
    [variant] = read_json(str(tmp_path / "lrs" / "lr_sensitivity.json"))["variants"]
    assert variant["losses"] == "training" and variant["best_lr"] == 0.1, variant
    assert all(p["final_loss"] < p["init_loss"] for p in variant["points"]), variant["points"]
    # Two shards of a sweep over the command's knob, merged where they ran: the merge checks their build.
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"base": {"threads": 1}, "dimensions": {"lr": {"log_range": [0.01, 10]}}}))
    for shard in ("0/2", "1/2"):
        rc, out, err = spikehunt("sweep", "--space", str(space), "--runs", "2", "--shard", shard, "--out",
                                 str(tmp_path / "s"), "--no-progress", "--no-repeat-check", "--steps", "8", "--",
                                 *[w.replace("{optimizer.lr}", "{lr}") for w in mlp], script=["-m", "spikehunt"])
        assert rc in (0, 1) and f"shard {shard}: 1 of 1 runs" in out, out + err
    shards = sorted(glob.glob(str(tmp_path / "s" / "shard-*-of-2")))
    rc, out, err = spikehunt("merge", str(tmp_path / "merged"), *shards, "--max-shrinks", "0",
                             script=["-m", "spikehunt"])
    assert rc in (0, 1) and "joined 2 run(s)" in out, out + err


def test_each_burst_writes_its_own_files_apart_and_the_scripts_relative_paths_still_work(tmp_path):
    """A script that reads data.json from its working directory and resumes from the progress.txt it
    writes there: each burst (and each preflight run) starts from the user's folder as it was, so the
    runs repeat, and nothing a burst wrote lands among the user's files."""
    import subprocess
    (tmp_path / "data.json").write_text('{"seed": 3}')
    (tmp_path / "train.py").write_text(
        "import argparse, json, os, torch, torch.nn as nn, torch.nn.functional as F\n"
        "p = argparse.ArgumentParser(); p.add_argument('--lr', type=float); a = p.parse_args()\n"
        "torch.manual_seed(json.load(open('data.json'))['seed'])\n"
        "start = int(open('progress.txt').read()) if os.path.exists('progress.txt') else 0\n"
        "for _ in range(start):\n    torch.randn(8, 4)  # the batches an earlier run trained on\n"
        "m = nn.Linear(4, 2); o = torch.optim.SGD(m.parameters(), lr=a.lr)\n"
        "for i in range(5):\n"
        "    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))\n"
        "    o.zero_grad(); F.cross_entropy(m(x), y).backward(); o.step()\n"
        "    open('progress.txt', 'w').write(str(start + i + 1))\n")
    (tmp_path / "space.json").write_text(json.dumps({"dimensions": {"lr": {"log_range": [0.01, 0.1]}}}))
    p = subprocess.run([sys.executable, "-m", "spikehunt", "sweep", "--space", "space.json", "--runs", "2", "--out",
                        "out", "--no-progress", "--", sys.executable, "train.py", "--lr", "{lr}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "2 runs, 0 failed" in p.stdout, p.stdout + p.stderr
    assert "saw other data" not in p.stderr, p.stderr
    assert not (tmp_path / "progress.txt").exists(), "a burst's own file landed in the user's folder"


def test_a_sweep_runs_two_torchrun_bursts_at_once_each_on_a_rendezvous_port_of_its_own(tmp_path):
    """-j 2: two bursts of `torchrun --nproc-per-node 2` at the same time would both listen on torchrun's
    default port 29500 (the second: "address already in use", crashed); each gets a free port."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"base": {"threads": 1}, "dimensions": {"lr": {"set": [0.05, 0.1]}}}))
    rc, out, err = spikehunt("sweep", "--space", str(space), "--runs", "2", "-j", "2", "--out", str(tmp_path / "out"),
                             "--no-progress", "--no-repeat-check", "--steps", "5", "--", sys.executable, "-m",
                             "torch.distributed.run", "--nproc-per-node", "2", "examples/commands/train_ddp.py",
                             "--lr", "{lr}", script=["-m", "spikehunt"])
    assert rc == 0 and "2 runs, 0 failed" in out, out + err


@pytest.mark.parametrize("script, knob, healthy", [
    ("examples/commands/train_globals.py", "--learning_rate={lr}", "--learning_rate=0.001"),  # nanoGPT's style
    ("examples/commands/train_hydra_style.py", "optim.lr={lr}", "optim.lr=0.01"),            # Hydra's overrides
])
def test_scripts_written_other_ways_run_healthy_and_their_unstable_rates_are_found_shrunk_and_replayed(
        tmp_path, script, knob, healthy):
    rc, out, err = run(tmp_path / "run", script, healthy, flags=["--steps", "12"])
    assert rc == 0 and "verdict: healthy after 12 of 12 steps" in out, out + err
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"base": {"threads": 1}, "dimensions": {"lr": {"log_range": [0.01, 10]}}}))
    rc, out, err = spikehunt("sweep", "--space", str(space), "--runs", "4", "--out", str(tmp_path / "sweep"),
                             "--no-progress", "--no-repeat-check", "--max-shrinks", "1", "--shrink-bursts", "2",
                             "--steps", "12", "--", sys.executable, script, knob, script=["-m", "spikehunt"])
    high = [line.split() for line in out.splitlines() if line.strip().startswith("params.lr [1, 10)")]
    assert rc == 1 and high and high[0][3] == "1/1", out + err  # the unstable region: every run there failed
    minimal = out.split("minimal config")[1].split("shrink:")[0]
    assert "params.lr=" in minimal, "shrunk to a rate away from the space's simplest: " + out
    assert "replay: reproduced" in out, out
