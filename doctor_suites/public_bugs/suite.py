#!/usr/bin/env python3
"""Runs the doctor on every case of cases.py in this one process and reports
as the field's anchors do: per bug, whether a sign fired (detected) and
whether the top-ranked cause is the expected one (diagnosed); per healthy
program, over 3 seeds and 3 learning rates, any failed sign (a false alarm).

    PYTHONPATH=build/python .venv/bin/python examples/public_bugs/suite.py [--bugs | --healthy] [--json FILE]

Exit code 0 when every bug is diagnosed and no healthy run raised an alarm, 1 otherwise."""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import spikehunt  # noqa: E402
import cases  # noqa: E402

CONFIG = os.path.join(HERE, "public_bugs.json")
DOCTOR = ["--steps", "40", "--overfit-steps", "300", "--json"]

# case: (source, expected top sign, a phrase its cause must contain)
EXPECTED = {
    "functional_dropout_eval": ("Coderx7/SimpleNet#2", "eval_consistency", "random"),
    "attention_dropout_eval": ("karpathy/nanoGPT#240", "eval_consistency", "random"),
    "eval_never_undone": ("pytorch/tutorials#1624", "eval_consistency", "trains in eval mode"),
    "validation_leaves_batchnorm_frozen": ("huggingface/lerobot#3668", "eval_consistency", "trains in eval mode"),
    "validation_without_train_start": ("fartashf/vsepp#4", "eval_consistency", "trains in eval mode"),
    "softmax_over_batch": ("DeepReinforcementLearning/DeepReinforcementLearningInAction#32", "eval_consistency",
                           "other samples of its batch"),
    "log_softmax_over_batch": ("ctallec/world-models#10", "eval_consistency", "other samples of its batch"),
    "softmax_one_unit": ("AyanKumarBhunia/Deep-One-Shot-Logo-Retrieval#7", "input_dependence", "one output unit"),
    "softmax_then_cross_entropy": ("NaJaeMin92/pytorch-DANN#7", "loss_output_mismatch", "softmax is applied twice"),
    "matching_softmax_cross_entropy": ("gitabcworld/MatchingNetworks#5", "loss_output_mismatch",
                                       "softmax is applied twice"),
    "nll_on_softmax": ("AnubhavGupta3377/Text-Classification-Models-Pytorch#9", "loss_domain", "below 0"),
    "nll_on_scores": ("yanx27/Pointnet_Pointnet2_pytorch#30", "loss_domain", "below 0"),
    "hand_written_softmax": ("pyg-team/pytorch_geometric#53", "loss_domain", "exp of a large output"),
    "log_of_softmax_probabilities": ("skorch-dev/skorch#481", "loss_domain", "log of a probability"),
    "hand_written_binary_cross_entropy": ("huggingface/candle#2561", "loss_domain", "underflowed to 0"),
    "squeezed_logits_against_column_labels": ("deepset-ai/FARM#229", "loss_shapes", "broadcast"),
    "critic_against_unreduced_target": ("sunwuzhou03/reinforcement-learning-lab#1", "loss_shapes", "broadcast"),
    "all_labels_zero": ("btheodorou99/HALO_Inpatient#13", "label_balance", "every training label is class 0"),
    "test_set_not_normalized": ("JeasunLok/ResNet-pytorch#1", "heldout_inputs", "preprocessed differently"),
    "features_and_labels_shuffled_apart": ("udacity/sdc-issue-reports#1326", "prediction_collapse",
                                           "unrelated to the inputs"),
    "labels_out_of_range": ("TencentGameMate/gnn_cross_lingual#5", "training_code_error", "6 classes but a label is"),
    "grayscale_mask_targets": ("milesial/Pytorch-UNet#291", "training_code_error", "255"),
    "shared_vae_optimizer": ("zdebruine/MMVAE#39", "optimizer_coverage", "decoder"),
    "scheduler_without_optimizer_step": ("pytorch/pytorch#3814", "optimizer_coverage", "never changes"),
    "scheduler_stepped_per_batch": ("ivadomed/ivadomed#55", "lr_schedule", "falls to under 1%"),
    "gradients_never_zeroed": ("yastrebksv/TennisCourtDetector#7", "grad_accumulation", "never reset"),
}
SEEDS = [0, 1, 2]
# The config's optimizer.lr per program, spanning 10x where the program trains (the Adam parts take 0.02x).
LRS = {"healthy_regression": [0.003, 0.01, 0.03]}
DEFAULT_LRS = [0.01, 0.03, 0.1]


def doctor(scenario, *sets, config=CONFIG):
    """The doctor's JSON report on one case, run in this process (its stdout captured at the fd)."""
    argv = ["suite", "doctor", "--config", config, "--set", f'scenario="{scenario}"', *DOCTOR]
    for s in sets:
        argv += ["--set", s]
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 1)
        try:
            rc = spikehunt.main(argv, exit=False)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        return rc, json.loads(out.read().decode())


def failed(report):
    return [s["name"] for s in report["signs"] if not s["passed"]]


class Suite:
    """One suite: its expected causes, its healthy programs, its config and learning rates."""

    def __init__(self, expected, healthy, config, lrs=None, default_lrs=DEFAULT_LRS):
        self.expected, self.healthy, self.config = expected, healthy, config
        self.lrs, self.default_lrs = lrs or {}, default_lrs

    def doctor(self, scenario, *sets):
        return doctor(scenario, *sets, config=self.config)

    def run_bugs(self, only=None):
        rows = []
        for case, (source, sign, phrase) in self.expected.items():
            if only and case not in only:
                continue
            start = time.time()
            rc, report = self.doctor(case)
            top = report["most_likely_cause"] or {}
            diagnosed = top.get("sign") == sign and phrase in top.get("cause", "")
            rows.append({"case": case, "source": source, "expected": sign, "expected_phrase": phrase,
                         "top": top.get("sign"), "cause": top.get("cause"),
                         "other_signs": [n for n in failed(report) if n != top.get("sign")],
                         "detected": rc == 1 and bool(failed(report)), "diagnosed": diagnosed,
                         "seconds": round(time.time() - start, 1)})
        return rows

    def run_healthy(self, only=None):
        rows = []
        for case in self.healthy:
            if only and case not in only:
                continue
            for lr in self.lrs.get(case, self.default_lrs):
                for seed in SEEDS:
                    rc, report = self.doctor(case, f"seed={seed}", f"optimizer.lr={lr}")
                    rows.append({"case": case, "seed": seed, "lr": lr, "alarms": failed(report), "rc": rc})
        return rows

    def main(self, description):
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--bugs", action="store_true", help="only the publicly reported bugs")
        parser.add_argument("--healthy", action="store_true", help="only the healthy programs")
        parser.add_argument("--only", nargs="*", help="these cases only")
        parser.add_argument("--json", help="write the rows to this file")
        args = parser.parse_args()
        both = not args.bugs and not args.healthy
        bugs = self.run_bugs(args.only) if args.bugs or both else []
        healthy = self.run_healthy(args.only) if args.healthy or both else []
        if bugs:
            print("| case | source | expected | top cause | other signs |")
            print("| --- | --- | --- | --- | --- |")
            for r in bugs:
                mark = "" if r["diagnosed"] else " **(wrong)**"
                print(f"| {r['case']} | {r['source']} | {r['expected']} | {r['top']}{mark}: {r['cause']} | "
                      f"{', '.join(r['other_signs']) or '-'} |")
            print(f"\nbugs: {len(bugs)}, detected {sum(r['detected'] for r in bugs)}, "
                  f"diagnosed (right top cause) {sum(r['diagnosed'] for r in bugs)}")
        if healthy:
            alarms = [r for r in healthy if r["alarms"]]
            for r in alarms:
                print(f"false alarm: {r['case']} seed {r['seed']} lr {r['lr']}: {', '.join(r['alarms'])}")
            print(f"healthy runs: {len(healthy)} ({len(self.healthy)} programs x {len(SEEDS)} seeds x 3 "
                  f"learning rates), false alarms {len(alarms)}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"bugs": bugs, "healthy": healthy}, f, indent=1)
        ok = all(r["diagnosed"] for r in bugs) and not any(r["alarms"] for r in healthy)
        sys.exit(0 if ok else 1)


SUITE = Suite(EXPECTED, cases.HEALTHY, CONFIG, LRS)
run_bugs, run_healthy = SUITE.run_bugs, SUITE.run_healthy


def main():
    SUITE.main(__doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
