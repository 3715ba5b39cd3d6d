"""spikehunt for Lightning (pytorch_lightning or lightning 2.x): the monitor as a
Callback in your own trainer.fit().

    import spikehunt.lightning
    trainer = pl.Trainer(callbacks=[spikehunt.lightning.Monitor(out="results/watch")])
    trainer.fit(model, datamodule)

Each optimizer step is watched as `run` watches one: the batch hashed, the taps
(submodules named by `taps`, and spikehunt.tap() values), the LightningModule's
output when training_step calls self(...), the loss, the gradients (when
Lightning's on_before_optimizer_step comes: after backward and any AMP unscaling,
before Lightning clips them), the parameters before and after the step and the
optimizer's state. The run's folder gets the same trace.jsonl, verdict.json and
checkpoints as `run` when training ends. A non-finite step stops the fit
(Trainer.should_stop) unless stop=False; fail_fast=True raises NonFiniteError at
the first non-finite tensor, naming it and its stage.
"""
from .watch import NonFiniteError, Watch, split_batch  # noqa: F401

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package
    from pytorch_lightning.callbacks import Callback


class Monitor(Callback):
    """A Lightning Callback running spikehunt's monitor. out, taps, fail_fast, rules,
    checkpoints and num_classes are spikehunt.Watch's; batch: a function from Lightning's
    batch to (inputs, targets) (default: a tuple or list's first two tensors, or a dict's
    "input_ids"/"inputs"/"x" and "labels"/"targets"/"y"); stop: end the fit at a
    non-finite step."""

    def __init__(self, out="results/watch", taps="leaves", fail_fast=False, rules=None, checkpoints=True,
                 num_classes=10, batch=None, stop=True):
        super().__init__()
        self._options = dict(out=out, taps=taps, fail_fast=fail_fast, rules=rules, checkpoints=checkpoints,
                             num_classes=num_classes)
        self._split = batch or split_batch
        self._stop = stop
        self.watch = None
        self.path = None
        self._batch = None
        self._micro = []
        self._stepping = False

    def on_train_start(self, trainer, pl_module):
        if len(trainer.optimizers) == 0:
            raise ValueError("spikehunt.lightning.Monitor: the LightningModule's configure_optimizers() gave no "
                             "optimizer: there is no step to watch")
        planned = trainer.estimated_stepping_batches
        self.watch = Watch(pl_module, list(trainer.optimizers),
                           planned_steps=int(planned) if planned != float("inf") else 0, **self._options)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.watch is not None:
            self._batch = self.watch._batch = self._split(batch, "spikehunt.lightning.Monitor")

    def on_before_backward(self, trainer, pl_module, loss):
        if self.watch is None or self._batch is None:
            return
        outputs = self.watch._outputs if self.watch._outputs is not None else loss.detach()
        self.watch._outputs = self.watch._batch = None
        self._micro.append((*self._batch, outputs, loss))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self.watch is None or not self._micro or self._stepping:
            return  # a second optimizer in the same step: its gradients were read with the first's
        micro, self._micro = self._micro, []
        self._stepping = True
        record = self.watch._begin(micro)
        if record is None:
            record = self.watch._after_backward()
        if record is not None:  # the step ended at a non-finite value (fail_fast)
            self._stepping = False
            self._ended(trainer, record)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.watch is None or not self._stepping:
            return
        self._stepping = False
        self._ended(trainer, self.watch._finish())

    def _ended(self, trainer, record):
        if self.watch.ended is not None and self._stop:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        self._close()

    def on_exception(self, trainer, pl_module, exception):
        self._close()

    def _close(self):
        if self.watch is not None and self.path is None:
            self.path = self.watch.close()
            print(f"spikehunt: {self.watch._core.text().strip()}\nspikehunt: results in {self.path}", flush=True)
