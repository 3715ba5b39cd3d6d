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
from conftest import CONFIG, read_json, read_jsonl, run_folder, spikehunt as cli

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
    watched = read_jsonl(os.path.join(callback.path, "trace.jsonl"))
    assert read_json(os.path.join(callback.path, "verdict.json"))["outcome"] == "healthy"
    rc, out, err = cli("run", "--config", CONFIG, "--out", str(tmp_path / "run"))
    assert rc == 0, out + err
    ran = read_jsonl(os.path.join(run_folder(tmp_path / "run"), "trace.jsonl"))
    assert len(watched) == len(ran) == 12
    for a, b in zip(watched, ran):
        a.pop("step_ms"), b.pop("step_ms")
        assert a == b  # hashes, loss, taps, every layer's gradient, parameter and momentum statistics


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
