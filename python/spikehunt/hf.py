"""spikehunt for the Hugging Face Trainer (transformers): your model and dataset as a
scenario under every verb (the Trainer's own step), or the monitor as a TrainerCallback
in your own trainer.train().

    spikehunt.hf.scenario("mine", make_model, make_dataset, args={"max_steps": 200})
    if __name__ == "__main__":
        spikehunt.main()        # python3 train.py sweep --space mine_space.json ...

or

    import spikehunt.hf
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[spikehunt.hf.Monitor(out="results/watch")])
    trainer.train()

Each optimizer step is watched as `run` watches one: the model's inputs
(input_ids, or its first tensor argument) and labels hashed, the taps, the
logits and the loss the model returned, the gradients after the Trainer clipped
them (max_grad_norm: the callback's on_pre_optimizer_step comes after
clipping), the parameters before and after the step and the optimizer's state.
The run's folder gets the same trace.jsonl, verdict.json and checkpoints as
`run` when training ends. A non-finite step stops training
(control.should_training_stop) unless stop=False; fail_fast=True raises
NonFiniteError at the first non-finite tensor, naming it and its stage.
"""
import torch
from transformers import TrainerCallback

from ._callbacks import WatchedSteps
from .watch import NonFiniteError, Watch  # noqa: F401


def _first_tensor(args, kwargs, names):
    for n in names:
        if isinstance(kwargs.get(n), torch.Tensor):
            return kwargs[n]
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


class Monitor(WatchedSteps, TrainerCallback):
    """A TrainerCallback running spikehunt's monitor. out, taps, fail_fast, rules,
    checkpoints and num_classes are spikehunt.Watch's (num_classes: the label
    histogram's width; the vocabulary size for a language model is too wide to be
    useful, so it defaults to 0: no histogram); stop: end training at a non-finite step."""

    def __init__(self, out="results/watch", taps="leaves", fail_fast=False, rules=None, checkpoints=True,
                 num_classes=0, stop=True):
        WatchedSteps.__init__(self, dict(out=out, taps=taps, fail_fast=fail_fast, rules=rules,
                                         checkpoints=checkpoints, num_classes=num_classes), stop)
        self._control = None
        self._hooks = []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if model is None or optimizer is None:
            raise ValueError("spikehunt.hf.Monitor: the Trainer gave the callback no model or optimizer "
                             "at on_train_begin")
        self._control = control
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds the torch optimizer
        self._start(model, [optimizer], state.max_steps or 0, args.gradient_accumulation_steps)
        self._hooks = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                       model.register_forward_hook(self._post, with_kwargs=True)]

    def _watching(self, model):
        return self.watch is not None and model.training and torch.is_grad_enabled()

    # The model's own forward hooks: its inputs and labels begin a micro-batch, its loss ends it.
    def _pre(self, model, args, kwargs):
        if not self._watching(model):
            return
        inputs = _first_tensor(args, kwargs, ("input_ids", "pixel_values", "inputs_embeds", "input_values"))
        labels = kwargs.get("labels")
        self._batch((inputs if inputs is not None else torch.zeros(0),
                     labels if isinstance(labels, torch.Tensor) else torch.zeros(0, dtype=torch.long)))

    def _post(self, model, args, kwargs, output):
        if not self._watching(model) or not (self.watch.live or self._pending is not None):
            return
        loss = output.get("loss") if hasattr(output, "get") else None
        if not isinstance(loss, torch.Tensor):
            raise ValueError(f"spikehunt.hf.Monitor: {type(model).__name__}'s forward returned no loss "
                             f"(pass labels in the batch, so the model computes its loss): the monitor reads "
                             f"the loss the model returns")
        logits = output.get("logits") if hasattr(output, "get") else None
        self._loss(loss, (logits if isinstance(logits, torch.Tensor) else loss).detach())

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.watch is not None:
            self._before_step()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._after_step()

    def _stop_training(self):
        self._control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is not None and not self.watch.closed:
            for h in self._hooks:
                h.remove()
        self._close()


# ---- a transformers model and dataset as a scenario: every verb on the Trainer's own step ----

# TrainingArguments the config sets (so a sweep varies them and a repro records them).
_FROM_CONFIG = {"per_device_train_batch_size": "batch_size", "per_device_eval_batch_size": "batch_size",
                "learning_rate": "optimizer.lr", "weight_decay": "optimizer.weight_decay", "seed": "seed",
                "data_seed": "seed", "gradient_accumulation_steps": "accumulation_steps", "use_cpu": "device"}


def scenario(name, model, train_dataset, args=None, eval_dataset=None, data_collator=None, params=(),
             taps="leaves", num_classes=0):
    """Registers a transformers model and its dataset as the scenario `name`: run, sweep
    (shrink, replay), doctor, guard, lr-sensitivity and Slurm shards then train it as they
    train any scenario, through spikehunt.main(). The step is the Trainer's own: a
    transformers.Trainer is built (never .train()ed) for its data loader, collator,
    compute_loss, optimizer and learning-rate schedule; spikehunt runs the loop.

    model, train_dataset, eval_dataset: functions (or classes) that build them; each
      argument they name comes from the config's params by name (declare them in
      `params`), else lr, batch_size, seed ... (as spikehunt.lightning.scenario), else its
      default. Build the model from a config object (GPT2Config(...)): nothing is
      downloaded.
    args: TrainingArguments fields (optim, lr_scheduler_type, warmup_steps, max_steps,
      num_train_epochs, max_grad_norm, ...), except those the config sets: batch_size,
      optimizer.lr, optimizer.weight_decay, seed, accumulation_steps, device. The config's
      grad_clip, when > 0, replaces max_grad_norm; max_batches_per_epoch cuts each epoch."""
    import math
    import tempfile

    import transformers

    from . import ContractError
    from ._frameworks import FrameworkScenario, batches_per_epoch, epochs_of, from_config, register_as
    from .watch import split_batch

    where = f"spikehunt.hf.scenario({name!r})"
    options = dict(args or {})
    taken = sorted(k for k in options if k in _FROM_CONFIG)
    if taken:
        raise ContractError(f"{where}: args sets {', '.join(f'{k} (the config: {_FROM_CONFIG[k]})' for k in taken)}: "
                            f"the config gives them, so a sweep can vary them and a repro records them")

    class HfScenario(FrameworkScenario):
        def __init__(self, config):
            super().__init__(config)
            self.net = from_config(model, config, where)
            train = from_config(train_dataset, config, where)
            evals = from_config(eval_dataset, config, where) if eval_dataset is not None else None
            self._scratch = tempfile.TemporaryDirectory(prefix="spikehunt-hf-")  # the Trainer's output_dir, unused
            defaults = dict(save_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True)
            self.args = transformers.TrainingArguments(
                output_dir=self._scratch.name, per_device_train_batch_size=config.batch_size,
                per_device_eval_batch_size=config.batch_size, learning_rate=config.optimizer.lr,
                weight_decay=config.optimizer.weight_decay, seed=config.seed, data_seed=config.seed,
                use_cpu=config.device != "cuda", **{**defaults, **options})
            self.trainer = transformers.Trainer(model=self.net, args=self.args, train_dataset=train,
                                                eval_dataset=evals, data_collator=data_collator)
            first = self.trainer.get_train_dataloader()
            per_epoch = batches_per_epoch(first, where, config.max_batches_per_epoch)
            # As the Trainer counts: max_steps, when set, wins over num_train_epochs (the data cycles).
            max_steps = self.args.max_steps if self.args.max_steps > 0 else 0
            epochs = math.ceil(max_steps / per_epoch) if max_steps else max(math.ceil(self.args.num_train_epochs), 1)
            self._planned = max_steps or epochs * per_epoch
            self.trainer.create_optimizer_and_scheduler(num_training_steps=self._planned)
            self.opt, self.schedule = self.trainer.optimizer, self.trainer.lr_scheduler
            self._clip = config.grad_clip if config.grad_clip > 0 else float(self.args.max_grad_norm or 0)
            self._watch_root(self.net)
            loaders = [first]  # the first epoch's loader is the one measured above

            def loader(epoch):
                return loaders.pop() if loaders else self.trainer.get_train_dataloader()
            self._batches = epochs_of(loader, epochs, config.max_batches_per_epoch, max_steps, config.seed)

        def train_loader(self):
            return self.trainer.get_train_dataloader()

        def split(self, raw):
            return split_batch(raw, where)

        def model(self):
            return self.net

        def next_batch(self):
            item = next(self._batches, None)
            return None if item is None else self._batch_of(item)

        def step_loss(self, raw, index):
            return self.trainer.compute_loss(self.net, self.trainer._prepare_inputs(raw))

        def heldout(self, max_samples):
            if self.trainer.eval_dataset is None:
                return []
            return self._heldout_of(self.trainer.get_eval_dataloader(), max_samples)

        def optimizer_step(self):
            self.opt.step()
            self.schedule.step()

    return register_as(name, HfScenario, model, taps, num_classes, params)
