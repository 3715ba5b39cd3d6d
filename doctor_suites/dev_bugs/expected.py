"""What the doctor should say about each case of bugs.py, written before the doctor first ran on
it (the commit that adds a batch holds its expectations and nothing the doctor printed).

case: (faulty part, a regular expression the top-ranked cause must match, case-insensitive).
The part is one of the parts the doctor swaps (docs/doctor.md): data, init, model, loss, optimizer,
step, evaluation. The expression names the mechanism in words a right diagnosis would use, not a
sign's wording."""

EXPECTED = {
    # ---- batch 1 (22 cases), committed before the doctor's first run on them
    "same_batch_every_step": ("data", r"same batch|1 distinct|one distinct|identical to|repeat"),
    "heldout_class_order_mismatch": ("evaluation", r"held-out labels|permut|class (order|map|index)|labels .*(shifted|mapped)"),
    "warmup_never_stepped": ("optimizer", r"learning rate[^.;]*\b(is|stays|of|at|peak) 0\b|learning rate[^.;]*zero|lr[^.;]*= ?0\b"),
    "weight_decay_typo": ("optimizer", r"weight decay|decay[^.;]*(dominat|larger|outweigh)"),
    "adam_epsilon_one": ("optimizer", r"\beps|epsilon"),
    "plateau_mode_max_on_loss": ("optimizer", r"learning rate[^.;]*(falls|drops|decay|under|reduc|shrink)|plateau|schedul"),
    "zero_grad_between_backward_and_step": ("step", r"(gradient|\.grad)[^.;]*(zero|cleared|reset)[^.;]*(before|between)|zero_grad"),
    "manual_update_rebinds_local": ("step", r"never change|not (applied|changed)|(no|none of the) (parameter|weight)s? (change|move)|update[^.;]* not"),
    "bf16_without_master_weights": ("step", r"bfloat16|bf16|round|precision|float32 (master|cop)"),
    "checkpointed_block_without_grad_input": ("model", r"no gradient reaches|checkpoint|(zero|no) gradient"),
    "init_normal_std_one": ("init", r"initiali[sz]|init\b|fan.in|scale of [^.;]*(output|layer)"),
    "zero_init_hidden": ("init", r"initiali[sz]|init\b|zero[^.;]*(weight|init)|symmetr|identical"),
    "nll_without_minus": ("loss", r"sign|negat|maximi|below 0|minus"),
    "kl_div_on_probabilities": ("loss", r"log.?prob|kl_div|below 0|negative"),
    "class_weights_from_counts": ("loss", r"class weight|weight[^.;]*(class|count)"),
    "binary_targets_inverted": ("loss", r"invert|opposite|swapped|permut|1 ?- ?(y|target)|flipped"),
    "inverted_causal_mask": ("model", r"mask|attention|-inf"),
    "additive_boolean_mask": ("model", r"later positions|future|causal|mask"),
    "view_instead_of_transpose": ("model", r"other samples of its batch|mix|batch dimension|view|transpose|permute"),
    "eps_outside_sqrt": ("model", r"divi|sqrt|0/0|\beps|norm"),
    "ema_evaluated_too_early": ("evaluation", r"eval|EMA|moving average"),
    "dropout_rescaled_at_eval": ("evaluation", r"eval[^.;]*(mode|scale|differ)|train(ing)?[^.;]* eval|dropout"),
    # ---- batch 2 (10 cases), committed after batch 1 was improved on, before the doctor's first run on them
    "sgd_positional_momentum_as_lr": ("optimizer", r"learning rate[^.;]*(0\.9|too (high|large))|positional|\blr\b[^.;]*0\.9"),
    "grad_clip_max_norm_tiny": ("step", r"clip|max.?norm|update[^.;]*(tiny|small|shrink)"),
    "normalized_in_255_units": ("data", r"normaliz|inputs[^.;]*(barely|hardly|vary|constant|tiny|spread)|255"),
    "lstm_reads_first_timestep": ("model", r"first (time ?step|position)|out\[:, ?0\]|last (time ?step|position)"),
    "batchnorm_momentum_zero": ("evaluation", r"momentum|running (statistics|mean|var)"),
    "warmup_longer_than_run": ("schedule", r"warm.?up|learning rate[^.;]*(only|never|below|under|of its|reach)"),
    "hidden_state_not_detached": ("model", r"graph a second time|hidden state|detach|previous (step|batch)"),
    "cross_entropy_without_permute": ("loss", r"permute|transpose|class(es)? (in )?dimension|expected target size"),
    "targets_shifted_wrong_way": ("data", r"previous|earlier position|one position back|shift|targets are the inputs"),
    "freeze_everything_after_first_epoch": ("model", r"requires_grad|frozen|no trainable"),
    # ---- batch 3 (10 cases), committed after batches 1 and 2 were improved on, before the doctor's first run on them
    "inplace_residual_add": ("model", r"in-?place|modified by an inplace"),
    "init_in_forward": ("init", r"init|reset|changed? (between|outside|by something)|not the optimizer|nothing but the optimizer"),
    "label_encoding_per_batch": ("data", r"label[^.;]*(unrelated|inconsistent|change|differ|encod|remap|mean)"),
    "padding_mask_inverted": ("model", r"mask|padding|attention"),
    "nan_in_regression_targets": ("data", r"target[^.;]*(NaN|non-finite|missing)|NaN[^.;]*target"),
    "adam_lr_scaled_by_batch_size": ("optimizer", r"learning rate[^.;]*(0\.064|too (high|large))|\blr\b[^.;]*0\.064"),
    "eval_branch_skips_normalization": ("evaluation", r"eval"),
    "loss_mask_inverted": ("loss", r"pad|mask|ignore"),
    "optimizer_filter_inverted": ("optimizer", r"empty parameter list|no parameter|optimizer"),
    "finetune_lr_destroys_pretrained": ("optimizer", r"learning rate|\blr\b|forget|worse than (at )?(the )?start|falls from"),
    # ---- batch 4 (10 cases), committed after batches 1 to 3 were improved on, before the doctor's first run on them
    "loss_multiplied_for_precision": ("loss", r"loss[^.;]*(scal|1,?000|large|times|x the)|scaled"),
    "bias_only_optimizer": ("optimizer", r"no optimizer updates|not (held|updated)|only the bias"),
    "residual_branch_detached": ("model", r"no gradient reaches|detach"),
    "integer_division_of_pixels": ("data", r"inputs[^.;]*(zero|constant|barely|differ)|integer|255"),
    "seed_reset_every_step": ("data", r"same batch|1 distinct|identical|seed"),
    "temperature_zero": ("model", r"divi|temperature|/ ?0|by zero"),
    "target_in_features": ("data", r"target[^.;]*(feature|input|column)|leak"),
    "auxiliary_loss_weight_typo": ("loss", r"(auxiliary|extra|regulari[sz]|second|additional) (loss|term)|loss[^.;]*(term|weight|dominat)"),
    "learning_rate_tiny": ("optimizer", r"learning rate[^.;]*(small|tiny|1e-06|1\.00e-06)|\blr\b[^.;]*1(\.00)?e-0?6"),
    "bidirectional_last_step": ("model", r"backward (direction|half)|bidirectional|last (time ?)?step"),
    # ---- batch 5 (10 cases), committed after batches 1 to 4 were improved on, before the doctor's first run on them
    "flatten_mixes_samples": ("model", r"other samples of its batch|mix|batch dimension|\bview\b|reshape|flatten"),
    "softmax_on_regression_head": ("model", r"range|softmax|sum to 1|outside"),
    "threshold_in_forward": ("model", r"no gradient reaches|non-differentiable|threshold|round|does not depend on"),
    "causal_mask_on_query_axis": ("model", r"later positions|future|causal|mask"),
    "dropout_p_as_percent": ("model", r"dropout probability|between 0 and 1|percent"),
    "channels_last_into_conv": ("data", r"channels?|permute|NCHW|expected input"),
    "momentum_0999": ("optimizer", r"momentum|learning rate"),
    "bce_arguments_swapped": ("loss", r"target|argument|order|derivative"),
    "param_in_two_groups": ("optimizer", r"more than one parameter group|appear in more than one|two groups"),
    "loss_on_wrong_head": ("loss", r"head|no gradient reaches|(never|not) train|does not depend on"),
}

# Healthy programs, each at seeds 0 and 1 and the config's learning rate: any failed sign is a false alarm.
HEALTHY_SEEDS = [0, 1]
