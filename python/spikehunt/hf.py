"""spikehunt for the Hugging Face Trainer (transformers): the monitor as a
TrainerCallback in your own trainer.train().

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

from .watch import NonFiniteError, Watch  # noqa: F401


def _first_tensor(args, kwargs, names):
    for n in names:
        if isinstance(kwargs.get(n), torch.Tensor):
            return kwargs[n]
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    return None


class Monitor(TrainerCallback):
    """A TrainerCallback running spikehunt's monitor. out, taps, fail_fast, rules,
    checkpoints and num_classes are spikehunt.Watch's (num_classes: the label
    histogram's width; the vocabulary size for a language model is too wide to be
    useful, so it defaults to 0: no histogram); stop: end training at a non-finite step."""

    def __init__(self, out="results/watch", taps="leaves", fail_fast=False, rules=None, checkpoints=True,
                 num_classes=0, stop=True):
        self._options = dict(out=out, taps=taps, fail_fast=fail_fast, rules=rules, checkpoints=checkpoints,
                             num_classes=num_classes)
        self._stop = stop
        self.watch = None
        self.path = None
        self._micro = []
        self._inputs = None
        self._stepping = False
        self._hooks = []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if model is None or optimizer is None:
            raise ValueError("spikehunt.hf.Monitor: the Trainer gave the callback no model or optimizer "
                             "at on_train_begin")
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper holds the torch optimizer
        self.watch = Watch(model, [optimizer], planned_steps=int(state.max_steps or 0), **self._options)
        self._hooks = [model.register_forward_pre_hook(self._pre, with_kwargs=True),
                       model.register_forward_hook(self._post, with_kwargs=True)]

    def _watching(self, model):
        return self.watch is not None and model.training and torch.is_grad_enabled()

    def _pre(self, model, args, kwargs):
        if self._watching(model):
            inputs = _first_tensor(args, kwargs, ("input_ids", "pixel_values", "inputs_embeds", "input_values"))
            labels = kwargs.get("labels")
            self._inputs = self.watch._batch = (
                inputs if inputs is not None else torch.zeros(0),
                labels if isinstance(labels, torch.Tensor) else torch.zeros(0, dtype=torch.long))

    def _post(self, model, args, kwargs, output):
        if not self._watching(model) or self._inputs is None:
            return
        loss = output.get("loss") if hasattr(output, "get") else None
        if not isinstance(loss, torch.Tensor):
            raise ValueError(f"spikehunt.hf.Monitor: {type(model).__name__}'s forward returned no loss "
                             f"(pass labels in the batch, so the model computes its loss): the monitor reads "
                             f"the loss the model returns")
        logits = output.get("logits") if hasattr(output, "get") else None
        self._micro.append((*self._inputs, (logits if isinstance(logits, torch.Tensor) else loss).detach(), loss))
        self._inputs = self.watch._batch = None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.watch is None or not self._micro:
            return
        micro, self._micro = self._micro, []
        self.watch._outputs = None
        record = self.watch._begin(micro)
        if record is None:
            record = self.watch._after_backward()
        self._stepping = record is None
        if record is not None:
            self._ended(control)

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.watch is not None and self._stepping:
            self._stepping = False
            self.watch._finish()
            self._ended(control)

    def _ended(self, control):
        if self.watch.ended is not None and self._stop:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is not None and self.path is None:
            for h in self._hooks:
                h.remove()
            self.path = self.watch.close()
            print(f"spikehunt: {self.watch._core.text().strip()}\nspikehunt: results in {self.path}", flush=True)
