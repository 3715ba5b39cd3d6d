"""Lightning and the Hugging Face Trainer under spikehunt's monitor, for real
(the pinned pytorch-lightning and transformers from requirements.txt): a
LightningModule of tests/python/tiny.py's model under spikehunt.lightning.Monitor
writes the trace `tiny.py run` writes, bit for bit; a fit that blows up is
stopped at its first non-finite step with the tensor named; a 2-layer GPT-2
configured locally (no hub: there is no network) trained by transformers'
Trainer on Debian's fortunes under spikehunt.hf.Monitor records the losses and
gradient norms the Trainer logs, and a blow-up stops train()."""
import glob
import os
import random
import sys

import numpy
import pytest
import torch
import torch.nn.functional as F

import spikehunt
from conftest import read_json, read_jsonl, run_folder, spikehunt as cli, tiny_run_trace, traces_equal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny  # noqa: E402

import pytorch_lightning as pl  # noqa: E402  (requirements.txt pins it: scripts/setup.sh installs it)
import transformers  # noqa: E402

import spikehunt.hf  # noqa: E402
import spikehunt.lightning  # noqa: E402


class LitBlobs(pl.LightningModule):
    """tiny.py's Blobs as a LightningModule: the same layers, in the same order, so the same init."""

    def __init__(self, lr, jitter):
        super().__init__()
        self.save_hyperparameters()
        self.fc1 = torch.nn.Linear(8, 16)
        self.act = torch.nn.LeakyReLU(0.01)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x * (1 + 0.01 * self.hparams.jitter)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def lightning_fit(out, lr=0.1, steps=12, **monitor):
    """tiny.py's scenario as a Lightning fit: the same seeds, model, optimizer and batches."""
    random.seed(0)
    numpy.random.seed(0)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    jitter = random.random() + numpy.random.rand()
    module = LitBlobs(lr, jitter)
    batches = [tiny.blobs(32, generator) for _ in range(steps)]
    callback = spikehunt.lightning.Monitor(out=str(out), num_classes=4, **monitor)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    return callback, trainer


def test_a_lightning_fit_under_the_callback_writes_the_trace_the_scenario_writes_under_run(tmp_path):
    callback, trainer = lightning_fit(tmp_path / "fit")
    assert trainer.global_step == 12
    assert read_json(os.path.join(callback.path, "verdict.json"))["outcome"] == "healthy"
    assert traces_equal(os.path.join(callback.path, "trace.jsonl"), tiny_run_trace(tmp_path / "run")) == 12


def test_one_callback_in_two_fits_writes_a_folder_for_each(tmp_path):
    callback = spikehunt.lightning.Monitor(out=str(tmp_path), num_classes=4)
    paths = []
    for steps in (3, 5):
        module = LitBlobs(0.1, 0.0)
        batches = [tiny.blobs(8, torch.Generator().manual_seed(i)) for i in range(steps)]
        pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, callbacks=[callback]).fit(
            module, torch.utils.data.DataLoader(batches, batch_size=None))
        paths.append(callback.path)
    assert paths[0] != paths[1]
    assert [len(read_jsonl(os.path.join(p, "trace.jsonl"))) for p in paths] == [3, 5]


class SkipsOne(LitBlobs):
    """Returns None (Lightning's "skip this batch") from training_step at batch 2."""

    def training_step(self, batch, batch_idx):
        return None if batch_idx == 2 else super().training_step(batch, batch_idx)


def test_a_batch_whose_training_step_returns_none_is_no_step_of_the_trace(tmp_path):
    def fit(module, batches, out):
        torch.manual_seed(0)
        callback = spikehunt.lightning.Monitor(out=str(out), num_classes=4)
        pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, callbacks=[callback]).fit(
            module, torch.utils.data.DataLoader(batches, batch_size=None))
        return os.path.join(callback.path, "trace.jsonl")

    batches = [tiny.blobs(8, torch.Generator().manual_seed(i)) for i in range(5)]
    torch.manual_seed(0)
    skipping = SkipsOne(0.1, 0.0)
    torch.manual_seed(0)
    plain = LitBlobs(0.1, 0.0)
    # batch 2 skipped: the trace of the same fit without batch 2, hashes and all
    assert traces_equal(fit(skipping, batches, tmp_path / "skip"),
                        fit(plain, batches[:2] + batches[3:], tmp_path / "without")) == 4


def test_a_lightning_fit_that_blows_up_stops_at_its_first_non_finite_step_naming_the_tensor(tmp_path):
    callback, trainer = lightning_fit(tmp_path, lr=4, steps=80, rules={"param_jump_limit": 1000})
    v = read_json(os.path.join(callback.path, "verdict.json"))
    assert v["outcome"] == "non_finite" and v["onset_step"] < v["failure_step"], v
    assert v["fault"]["stage"] == "forward" and v["fault"]["tensor"] in ("fc1", "act", "fc2"), v["fault"]
    assert trainer.global_step == v["failure_step"] + 1 < 80  # should_stop after the failure step
    assert os.path.exists(os.path.join(callback.path, "last_healthy.safetensors"))


def test_fail_fast_raises_out_of_fit_naming_the_tensor_and_the_results_are_written(tmp_path):
    with pytest.raises(spikehunt.NonFiniteError, match=r"^step \d+: (fc1|act|fc2) \(forward\): "):
        lightning_fit(tmp_path, lr=4, steps=80, fail_fast=True, rules={"param_jump_limit": 1000})
    folders = glob.glob(os.path.join(tmp_path, "*", "verdict.json"))
    assert len(folders) == 1 and read_json(folders[0])["outcome"] == "non_finite"


FORTUNES = "/usr/share/games/fortunes/fortunes"


class Fortunes(torch.utils.data.Dataset):
    """Debian's fortunes (package fortunes) as byte-level sequences of 32 tokens."""

    def __init__(self, n):
        assert os.path.exists(FORTUNES), f"{FORTUNES} is missing: Debian's fortunes (scripts/setup.sh installs it)"
        data = torch.tensor(list(open(FORTUNES, "rb").read()[:n * 32]), dtype=torch.long)
        self.rows = data.view(n, 32)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def hf_train(out, lr, steps=10, **monitor):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                      bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(output_dir=str(out / "hf"), max_steps=steps, per_device_train_batch_size=8,
                                          learning_rate=lr, logging_steps=1, save_strategy="no", report_to=[],
                                          use_cpu=True, seed=0, disable_tqdm=True, max_grad_norm=1.0)
    callback = spikehunt.hf.Monitor(out=str(out / "watch"), **monitor)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Fortunes(steps * 8), callbacks=[callback])
    trainer.train()
    return callback, trainer


def test_a_hugging_face_train_under_the_callback_records_the_losses_and_norms_the_trainer_logs(tmp_path):
    callback, trainer = hf_train(tmp_path, lr=1e-3)
    trace = read_jsonl(os.path.join(callback.path, "trace.jsonl"))
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(trace) == len(logged) == 10
    for r, h in zip(trace, logged):
        assert r["loss"] == pytest.approx(h["loss"], rel=1e-3, abs=1e-4)
        # the Trainer logs the norm before it clips to max_norm 1; the monitor reads the gradients after
        assert r["grad_norm"] == pytest.approx(min(h["grad_norm"], 1.0), rel=1e-4)
    layers = {layer["name"] for layer in trace[0]["layers"]}
    assert "transformer.h.1.attn.c_attn.weight" in layers and trace[0]["activations"]
    assert read_json(os.path.join(callback.path, "verdict.json"))["outcome"] == "healthy"


def test_a_hugging_face_train_that_blows_up_is_stopped_and_the_tensor_named(tmp_path):
    callback, trainer = hf_train(tmp_path, lr=1e5, steps=40, rules={"param_jump_limit": 1e9})
    v = read_json(os.path.join(callback.path, "verdict.json"))
    assert v["outcome"] == "non_finite", v
    assert v["fault"]["tensor"] and v["fault"]["stage"], v["fault"]
    assert trainer.state.global_step == v["failure_step"] + 1 < 40


# ---- the frameworks' own code as scenarios (tests/python/frameworks.py) under every verb ----

FRAMEWORKS = os.path.join("tests", "python", "frameworks.py")
LIT = ['scenario="lit_blobs"', "batch_size=16", "max_batches_per_epoch=0", "threads=1"]
HF = ['scenario="hf_gpt2"', "batch_size=8", "threads=1"]


def run(out, *sets):
    args = ["run", "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    rc, stdout, err = cli(*args, script=FRAMEWORKS)
    return rc, run_folder(out), stdout + err


def test_a_lightning_scenario_builds_the_module_and_data_from_the_config():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
    import frameworks
    config = spikehunt.Config({"optimizer": {"lr": 0.3, "momentum": 0.5, "weight_decay": 0.0}, "seed": 0,
                               "params": {"width": 64}, "batch_size": 16, "max_batches_per_epoch": 0,
                               "grad_clip": 0.0, "device": "cpu"})
    s = spikehunt.lightning.scenario("lit_blobs_probe", frameworks.LitBlobs, frameworks.BlobData,
                                     trainer={"max_epochs": 3, "gradient_clip_val": 0.5})(config)
    assert dict(s.module.hparams) == {"lr": 0.3, "width": 64, "momentum": 0.5}  # save_hyperparameters() saw them
    assert s.module.fc1.out_features == 64 and s.data.batch_size == 16
    assert s.planned_steps() == 3 * 384 // 16 and s.grad_clip() == 0.5
    assert s.opt.param_groups[0]["lr"] == 0.3 and s.schedulers[0][1] == "step"  # the module's own StepLR
    batches = [s.next_batch() for _ in range(24 + 1)]
    assert [b.epoch for b in batches[23:]] == [0, 1] and batches[0].inputs.shape == (16, 8)


def test_a_lightning_scenario_runs_bit_identically_and_replays_its_failure_from_the_checkpoint(tmp_path):
    rc, a, out = run(tmp_path / "a", *LIT, "optimizer.lr=8")
    assert rc == 1, out
    v = read_json(os.path.join(a, "verdict.json"))
    assert v["outcome"] == "non_finite" and v["fault"]["tensor"], v
    rc, b, out = run(tmp_path / "b", *LIT, "optimizer.lr=8")
    assert traces_equal(os.path.join(a, "trace.jsonl"), os.path.join(b, "trace.jsonl")) == v["failure_step"] + 1
    rc, out, err = cli("replay", os.path.join(a, "repro.json"), "--from-checkpoint", script=FRAMEWORKS)
    assert rc == 0 and "reproduced: non_finite" in out, out + err
    rc, healthy, out = run(tmp_path / "c", *LIT, "optimizer.lr=0.1")
    assert rc == 0 and read_json(os.path.join(healthy, "verdict.json"))["steps_run"] == 2 * 384 // 16, out


def test_a_lightning_scenario_sweeps_shrinks_and_its_repros_replay(tmp_path):
    rc, out, err = cli("sweep", "--space", os.path.join("tests", "python", "frameworks_space.json"), "--runs", "8",
                       "-j", "2", "--max-shrinks", "1", "--shrink-bursts", "8", "--no-progress", "--out",
                       str(tmp_path), script=FRAMEWORKS)
    assert rc == 1, out + err
    repros = glob.glob(os.path.join(tmp_path, "repros", "*.repro.json"))
    assert repros, out
    shrunk = read_json(repros[0])
    assert shrunk["config"]["scenario"] == "lit_blobs"
    rc, out, err = cli("replay", repros[0], script=FRAMEWORKS)
    assert rc == 0 and "reproduced" in out and "not reproduced" not in out, out + err


def test_the_doctor_reads_a_lightning_scenario_and_finds_nothing_on_a_healthy_one():
    rc, out, err = cli("doctor", "--set", LIT[0], "--set", LIT[1], "--set", LIT[2], "--set", LIT[3], "--json",
                       script=FRAMEWORKS)
    report = __import__("json").loads(out)
    assert rc == 0 and report["passed"], [s["name"] for s in report["signs"] if not s["passed"] and not s["skipped"]]
    assert not [s for s in report["signs"] if s["skipped"] and s["name"] in ("overfit_one_batch", "eval_consistency")]


def test_a_hugging_face_scenario_trains_the_trainers_step_and_replays_its_failure(tmp_path):
    rc, healthy, out = run(tmp_path / "ok", *HF, "optimizer.lr=0.001")
    assert rc == 0, out
    # the header says what the scenario built (the Trainer's AdamW, its clipping), not the config's sgd
    assert "  train    optimizer AdamW lr 0 as built, batch 8, grad clip 1\n" in out, out
    trace = read_jsonl(os.path.join(healthy, "trace.jsonl"))
    assert len(trace) == 10 and trace[-1]["loss"] < trace[0]["loss"]
    assert [r["epoch"] for r in trace] == [0] * 10  # 96 rows / batch 8: 12 an epoch, cut at args' max_steps 10
    rc, bad, out = run(tmp_path / "bad", *HF, "optimizer.lr=10")  # AdamW (the Trainer's default) at lr 10
    v = read_json(os.path.join(bad, "verdict.json"))
    assert rc == 1 and v["outcome"] == "extreme" and 0 < v["onset_step"] < 10, out
    rc, out, err = cli("replay", os.path.join(bad, "repro.json"), "--from-checkpoint", script=FRAMEWORKS)
    assert rc == 0 and "reproduced: extreme" in out, out + err


def test_a_framework_scenario_refuses_what_it_cannot_map_naming_it():
    with pytest.raises(spikehunt.ContractError, match=r"trainer= holds precision"):
        spikehunt.lightning.scenario("x", LitBlobs, trainer={"precision": "16-mixed"})
    with pytest.raises(spikehunt.ContractError, match=r"args sets learning_rate \(the config: optimizer.lr\)"):
        spikehunt.hf.scenario("y", lambda: None, lambda: None, args={"learning_rate": 0.1})


def test_the_callback_and_the_scenario_take_the_umbrella_packages_lightning_pytorch_as_well(tmp_path):
    import lightning as L  # requirements.txt pins lightning too: `import lightning as L` is today's spelling

    class Umbrella(L.LightningModule):
        def __init__(self, lr=0.1):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)
            self.lr = lr

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.fc(batch[0]), batch[1])

        def train_dataloader(self):
            return torch.utils.data.DataLoader([tiny.blobs(16, torch.Generator().manual_seed(i)) for i in range(5)],
                                               batch_size=None)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    callback = spikehunt.lightning.Monitor(out=str(tmp_path), num_classes=4)
    L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, callbacks=[callback]).fit(Umbrella())
    assert len(read_jsonl(os.path.join(callback.path, "trace.jsonl"))) == 5
    config = spikehunt.Config({"optimizer": {"lr": 0.2, "momentum": 0.0, "weight_decay": 0.0}, "seed": 0,
                               "params": {}, "batch_size": 16, "max_batches_per_epoch": 0, "grad_clip": 0.0,
                               "device": "cpu"})
    s = spikehunt.lightning.scenario("umbrella_probe", Umbrella)(config)
    assert s.module.lr == 0.2 and s.planned_steps() == 5


def test_the_doctor_reads_a_healthy_hugging_face_model_without_a_false_alarm():
    """labels = input_ids is the Trainer's convention (the model shifts them): the doctor's probe of the
    loss cannot see a shift through compute_loss, which ignores the outputs it is handed, and says so
    instead of calling the targets a leak; the Trainer's schedule ends at max_steps (lr 0), so the
    one-batch memorizing check is not judged rather than failed."""
    args = []
    for s in HF + ["optimizer.lr=0.001"]:
        args += ["--set", s]
    rc, out, err = cli("doctor", *args, "--json", script=FRAMEWORKS)
    report = __import__("json").loads(out)
    assert rc == 0 and report["passed"], [s["name"] for s in report["signs"] if not s["passed"]]
    signs = {s["name"]: s for s in report["signs"]}
    assert "the loss does not follow the outputs it is given" in signs["target_leak"]["evidence"]
    assert signs["overfit_one_batch"]["skipped"]
    assert "it steps a schedule of its own that has ended" in signs["overfit_one_batch"]["evidence"]
