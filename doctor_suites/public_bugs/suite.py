#!/usr/bin/env python3
"""Runs the doctor on every case of cases.py in this one process (doctor_suites/evaluate.py,
the suites' one harness) and reports as the field's anchors do: per bug, whether a sign fired
(detected) and whether the top-ranked cause is the expected one (diagnosed); per healthy
program, over 3 seeds and 3 learning rates, any failed sign (a false alarm).

    PYTHONPATH=build/python .venv/bin/python doctor_suites/public_bugs/suite.py [--bugs | --healthy] [--json FILE]

Exit code 0 when every bug is diagnosed and no healthy run raised an alarm, 1 otherwise."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import cases  # noqa: E402
from evaluate import Suite  # noqa: E402

CONFIG = os.path.join(HERE, "public_bugs.json")

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
# The config's optimizer.lr per program, spanning 10x where the program trains (the Adam parts take 0.02x).
LRS = {"healthy_regression": [0.003, 0.01, 0.03]}
SUITE = Suite(EXPECTED, cases.HEALTHY, CONFIG, LRS)


def main():
    SUITE.main(__doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
