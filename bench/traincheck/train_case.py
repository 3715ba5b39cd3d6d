#!/usr/bin/env python3
"""One case of the doctor's suites (doctor_suites/public_bugs, unseen_bugs, dev_bugs) as a plain PyTorch
training script, for TrainCheck (PyPI `traincheck`, OSDI '25) to instrument: the case's own model,
optimizer, data, forward, loss and optimizer step, with no spikehunt in the loop. The variable
`model` is the model TrainCheck tracks; stages and steps are annotated as in its examples.

    SPIKEHUNT_CASE=healthy_mlp SPIKEHUNT_STEPS=40 traincheck-collect --pyscript train_case.py \\
        --models-to-track model --output-dir trace_healthy_mlp
"""
import os
import sys
import types

# TrainCheck runs a rewritten copy of this file from its output folder: the repository from the environment.
ROOT = os.environ.get("SPIKEHUNT_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "doctor_suites", "public_bugs"))
sys.path.insert(0, os.path.join(ROOT, "doctor_suites", "unseen_bugs"))

import torch  # noqa: E402
from traincheck import annotate_stage  # noqa: E402
from traincheck.instrumentor import META_VARS  # noqa: E402

import bugs  # noqa: E402  (the unseen suite; it imports the public suite's cases)
import cases  # noqa: E402


def _development_suite():
    """doctor_suites/dev_bugs/bugs.py, loaded under its own name (the unseen suite's file is bugs.py too)."""
    import importlib.util
    path = os.path.join(ROOT, "doctor_suites", "dev_bugs", "bugs.py")
    spec = importlib.util.spec_from_file_location("dev_bugs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

META_VARS["step"] = -1


def main():
    annotate_stage("init")
    name = os.environ["SPIKEHUNT_CASE"]
    steps = int(os.environ.get("SPIKEHUNT_STEPS", "40"))
    lr = float(os.environ.get("SPIKEHUNT_LR", "0.05"))
    seed = int(os.environ.get("SPIKEHUNT_SEED", "0"))
    dev = _development_suite()
    known = {**cases.BUGS, **cases.HEALTHY, **bugs.BUGS, **bugs.HEALTHY, **dev.BUGS, **dev.HEALTHY}
    torch.manual_seed(seed)
    config = types.SimpleNamespace(seed=seed, batch_size=64, threads=1,
                                   optimizer=types.SimpleNamespace(kind="sgd", lr=lr, momentum=0.9))
    case = known[name](config)
    model = case.model()
    optimizers = case.optimizers()
    optimizers = list(optimizers.values()) if isinstance(optimizers, dict) else [optimizers]
    annotate_stage("training")
    model.train()
    for _ in range(steps):
        batch = case.next_batch()
        if batch is None:
            break
        META_VARS["step"] += 1
        inputs, targets = batch
        for opt in optimizers:
            opt.zero_grad()
        loss = case.loss(case.forward(inputs), targets)
        loss.backward()
        case.optimizer_step()
    annotate_stage("testing")
    model.eval()
    with torch.no_grad():
        for inputs, targets in case.heldout(256):
            case.loss(case.forward(inputs), targets)


if __name__ == "__main__":
    main()
