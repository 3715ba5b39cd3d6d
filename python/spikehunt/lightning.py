"""spikehunt for Lightning (pytorch_lightning or lightning 2.x): your LightningModule
and DataModule as a scenario under every verb, or the monitor as a Callback in your
own trainer.fit().

    spikehunt.lightning.scenario("mine", MyModule, MyDataModule, trainer={"max_epochs": 2},
                                 params=[spikehunt.number("dropout", 0.1, 0, 1)])
    if __name__ == "__main__":
        spikehunt.main()        # python3 train.py sweep --space mine_space.json ...

or

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
import torch

from . import ContractError
from ._frameworks import FrameworkScenario, batches_per_epoch, epochs_of, from_config, register_as
from ._callbacks import WatchedSteps
from .watch import NonFiniteError, Watch, split_batch  # noqa: F401

# Lightning comes as two packages with the same code under two names: lightning.pytorch
# (the umbrella package `lightning`) and pytorch_lightning. A Trainer accepts only its own
# package's Callback, so the Monitor subclasses each one installed, and a module of either
# is a LightningModule.
_packages = []
for _name in ("lightning.pytorch", "pytorch_lightning"):
    try:
        _packages.append(__import__(_name, fromlist=["Callback"]))
    except ImportError:
        pass
if not _packages:
    raise ImportError("spikehunt.lightning needs Lightning 2.x: pip install pytorch-lightning (or lightning)")
_callbacks = tuple(p.Callback for p in _packages)
LightningModule = tuple(p.LightningModule for p in _packages)
LightningDataModule = tuple(p.LightningDataModule for p in _packages)
move_data_to_device = _packages[0].utilities.move_data_to_device


class Monitor(WatchedSteps, *_callbacks):
    """A Lightning Callback running spikehunt's monitor. out, taps, fail_fast, rules,
    checkpoints and num_classes are spikehunt.Watch's; batch: a function from Lightning's
    batch to (inputs, targets) (default: a tuple or list's first two tensors, or a dict's
    "input_ids"/"inputs"/"x" and "labels"/"targets"/"y"); stop: end the fit at a
    non-finite step."""

    def __init__(self, out="results/watch", taps="leaves", fail_fast=False, rules=None, checkpoints=True,
                 num_classes=10, batch=None, stop=True):
        for base in _callbacks:
            base.__init__(self)
        WatchedSteps.__init__(self, dict(out=out, taps=taps, fail_fast=fail_fast, rules=rules,
                                         checkpoints=checkpoints, num_classes=num_classes), stop)
        self._split = batch or split_batch
        self._trainer = None
        self._stepped = False
        self._backward = False  # this step's backward ran (a training_step that returns None: none)

    def on_train_start(self, trainer, pl_module):
        if len(trainer.optimizers) == 0:
            raise ValueError("spikehunt.lightning.Monitor: the LightningModule's configure_optimizers() gave no "
                             "optimizer: there is no step to watch")
        self._trainer, self._stepped, self._backward = trainer, False, False
        planned = trainer.estimated_stepping_batches
        self._start(pl_module, list(trainer.optimizers), int(planned) if planned != float("inf") else 0,
                    trainer.accumulate_grad_batches)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.watch is not None:
            self._batch(self._split(batch, "spikehunt.lightning.Monitor"))

    def on_before_backward(self, trainer, pl_module, loss):
        if self.watch is not None:
            self._backward = True
            self._loss(loss)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self.watch is None or self._stepped:
            return  # a second optimizer in the same step: its gradients were read with the first's
        self._stepped = True
        # training_step returned None: Lightning steps the optimizer with no gradients (no backward
        # ran), which changes nothing: the batch is no step of the trace
        self._before_step(backward=self._backward)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.watch is None:
            return
        if not self._stepped:
            self._pending = None  # a micro-batch skipped (training_step returned None) is dropped
            return
        self._backward = False
        self._stepped = False
        self._after_step()

    def _stop_training(self):
        self._trainer.should_stop = True

    def on_train_end(self, trainer, pl_module):
        self._close()

    def on_exception(self, trainer, pl_module, exception):
        self._close()


# ---- a LightningModule as a scenario: every verb on the user's unchanged module and data ----

_TRAINER_ARGS = ("max_epochs", "max_steps", "limit_train_batches", "gradient_clip_val", "gradient_clip_algorithm",
                 "reload_dataloaders_every_n_epochs")


class _TrainerStandIn:
    """What a LightningModule may read of self.trainer while spikehunt trains it: the
    protocol's length, the position, one process. Anything else is an AttributeError
    naming it."""

    def __init__(self, planned, max_epochs, max_steps, clip):
        self.estimated_stepping_batches = planned
        self.num_training_batches = planned
        self.max_epochs = max_epochs
        self.max_steps = max_steps if max_steps else -1
        self.current_epoch = 0
        self.global_step = 0
        self.gradient_clip_val = clip
        self.accumulate_grad_batches = 1
        self.num_devices = self.world_size = self.num_nodes = 1
        self.global_rank = self.local_rank = self.node_rank = 0
        self.is_global_zero = True
        self.training = True
        self.sanity_checking = False
        self.logger, self.loggers = None, []
        self.callback_metrics, self.logged_metrics, self.progress_bar_metrics = {}, {}, {}
        self.datamodule = None
        self.lightning_module = None
        self.optimizers, self.lr_scheduler_configs = [], []

    def __getattr__(self, name):
        raise AttributeError(f"spikehunt trains this LightningModule without a Trainer: its stand-in has no "
                             f"trainer.{name} (it has {', '.join(sorted(k for k in vars(self)))})")


def _no_log(*args, **kwargs):
    """self.log() and self.log_dict() under spikehunt: the monitor records the step."""


def _optimizers_of(conf, where):
    """configure_optimizers()'s return, in any form Lightning takes: (optimizer, [(scheduler,
    interval, frequency)])."""
    optimizers, schedulers = [], []

    def scheduler(s):
        if isinstance(s, dict):
            s, interval, frequency = s["scheduler"], s.get("interval", "epoch"), int(s.get("frequency", 1))
        else:
            interval, frequency = "epoch", 1
        if isinstance(s, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise ContractError(f"{where}: configure_optimizers() gives a ReduceLROnPlateau, which steps on a "
                                f"logged metric spikehunt does not have: use a scheduler of the step or epoch")
        if interval not in ("step", "epoch"):
            raise ContractError(f"{where}: a scheduler's interval is {interval!r}: 'step' or 'epoch'")
        schedulers.append((s, interval, frequency))

    if isinstance(conf, torch.optim.Optimizer):
        optimizers = [conf]
    elif isinstance(conf, dict):
        optimizers = [conf.get("optimizer")]
        if conf.get("lr_scheduler") is not None:
            scheduler(conf["lr_scheduler"])
    elif isinstance(conf, (list, tuple)):
        if len(conf) == 2 and all(isinstance(c, (list, tuple)) for c in conf):
            optimizers = list(conf[0])
            for s in conf[1]:
                scheduler(s)
        elif conf and all(isinstance(c, dict) for c in conf):
            for c in conf:
                optimizers.append(c.get("optimizer"))
                if c.get("lr_scheduler") is not None:
                    scheduler(c["lr_scheduler"])
        else:
            optimizers = list(conf)
    if len(optimizers) != 1 or not isinstance(optimizers[0], torch.optim.Optimizer):
        raise ContractError(f"{where}: configure_optimizers() gave {len(optimizers)} optimizer(s) "
                            f"({', '.join(type(o).__name__ for o in optimizers) or 'none'}): automatic "
                            f"optimization takes exactly one torch.optim.Optimizer")
    return optimizers[0], schedulers


def _overridden(obj, method, bases):
    """obj's class defines `method` itself (not only Lightning's default, which raises)."""
    return obj is not None and all(getattr(type(obj), method, None) is not getattr(b, method, None) for b in bases)


def scenario(name, module, datamodule=None, trainer=None, params=(), taps="leaves", num_classes=10, batch=None):
    """Registers a LightningModule, with its LightningDataModule, as the scenario `name`:
    run, sweep (shrink, replay), doctor, guard, lr-sensitivity and Slurm shards then train
    it as they train any scenario, through spikehunt.main().

    module, datamodule: the classes (or functions) that build them; each argument their
      __init__ names comes from the config: its params by name (declare them in `params`,
      as for register()), else lr / learning_rate (optimizer.lr), momentum, weight_decay,
      batch_size, seed, else the argument's default. save_hyperparameters() then records
      them in hparams as a fit would.
    trainer: the Trainer arguments spikehunt maps: max_epochs (default 1; with max_steps
      alone, as many as max_steps takes), max_steps,
      limit_train_batches, reload_dataloaders_every_n_epochs, gradient_clip_val (the
      config's grad_clip wins when > 0). The
      config's max_batches_per_epoch, when set, cuts each epoch, and accumulation_steps
      accumulates gradients.
    The step: configure_optimizers() (one optimizer; schedulers of interval step or epoch
    are stepped as Lightning steps them), train_dataloader() (the DataModule's, else the
    module's), training_step(batch, batch_idx) as forward and loss, val_dataloader() as
    the held-out batches. self.log() records nothing; self.trainer is a stand-in that
    answers the protocol's length and position."""
    where = f"spikehunt.lightning.scenario({name!r})"
    options = dict(trainer or {})
    unknown = sorted(set(options) - set(_TRAINER_ARGS))
    if unknown:
        raise ContractError(f"{where}: trainer= holds {', '.join(unknown)}: spikehunt maps "
                            f"{', '.join(_TRAINER_ARGS)} (the config gives the rest: docs/frameworks.md)")
    if options.get("gradient_clip_algorithm", "norm") != "norm":
        raise ContractError(f"{where}: gradient_clip_algorithm={options['gradient_clip_algorithm']!r}: spikehunt "
                            f"clips by the global norm ('norm')")
    max_epochs = int(options.get("max_epochs") or 1)
    max_steps = max(int(options.get("max_steps") or 0), 0)
    reload = int(options.get("reload_dataloaders_every_n_epochs") or 0)
    split = batch or (lambda b: split_batch(b, where))

    class LightningScenario(FrameworkScenario):
        def __init__(self, config):
            super().__init__(config)
            self.module = from_config(module, config, where)
            if not isinstance(self.module, LightningModule):
                raise ContractError(f"{where}: the module factory returned a {type(self.module).__name__}, "
                                    f"not a LightningModule")
            if not self.module.automatic_optimization:
                raise ContractError(f"{where}: {type(self.module).__name__} uses manual optimization: spikehunt "
                                    f"runs backward and the optimizer step itself (automatic optimization)")
            self.data = from_config(datamodule, config, where) if datamodule is not None else None
            if config.device == "cuda":
                self.module.to("cuda")
            clip = float(options.get("gradient_clip_val") or 0)
            self._clip = config.grad_clip if config.grad_clip > 0 else clip
            self.stand_in = _TrainerStandIn(0, max_epochs, max_steps, clip)  # the length once the data is read
            self.stand_in.lightning_module, self.stand_in.datamodule = self.module, self.data
            self.module.trainer = self.stand_in
            self.module.log = self.module.log_dict = _no_log
            if self.data is not None:
                self.data.trainer = self.stand_in
            for hooks in (self.data, self.module):  # as a fit calls them, on one process
                if hooks is not None:
                    hooks.prepare_data()
                    hooks.setup("fit")
            loader = self._loader()
            whole = batches_per_epoch(loader, where, config.max_batches_per_epoch)
            limit = config.max_batches_per_epoch or _limit(options.get("limit_train_batches"), whole)
            per_epoch = min(whole, limit) if limit else whole
            if max_steps and "max_epochs" not in options:  # max_steps alone: as many epochs as it takes
                self.stand_in.max_epochs = epochs = -(-max_steps // per_epoch)
            else:
                epochs = max_epochs
            self._planned = min(epochs * per_epoch, max_steps) if max_steps else epochs * per_epoch
            self.stand_in.estimated_stepping_batches = self.stand_in.num_training_batches = self._planned
            self.module.configure_model()
            self._watch_root(self.module)
            self.opt, self.schedulers = _optimizers_of(self.module.configure_optimizers(), where)
            self.stand_in.optimizers = [self.opt]
            self._train_loader = loader
            self._batches = epochs_of(self._epoch_loader, epochs, limit, max_steps, config.seed)
            self._epoch = 0

        def _epoch_loader(self, epoch):
            """The loader of epoch `epoch`: the same one every epoch, or a new one every n
            (reload_dataloaders_every_n_epochs), made with trainer.current_epoch at `epoch`."""
            self.stand_in.current_epoch = epoch
            if epoch > 0 and reload and epoch % reload == 0:
                self._train_loader = self._loader()
            return self._train_loader

        def _loader(self):
            source = self.data if _overridden(self.data, "train_dataloader", LightningDataModule) else self.module
            if source is self.data or _overridden(self.module, "train_dataloader", LightningModule):
                return source.train_dataloader()
            raise ContractError(f"{where}: neither the DataModule nor the LightningModule defines "
                                f"train_dataloader()")

        def train_loader(self):
            return self._loader()

        def split(self, raw):
            return split(raw)

        def model(self):
            return self.module

        def next_batch(self):
            item = next(self._batches, None)
            if item is None:
                return None
            epoch, index, raw = item
            while self._epoch < epoch:  # an epoch ended: its schedulers step, as Lightning steps them
                self._epoch += 1
                for s, interval, frequency in self.schedulers:
                    if interval == "epoch" and self._epoch % frequency == 0:
                        s.step()
            return self._batch_of(item)

        def step_loss(self, raw, index):
            if self.config.device == "cuda":
                raw = move_data_to_device(raw, "cuda")
            return self.module.training_step(raw, index)

        def heldout(self, max_samples):
            source = self.data if _overridden(self.data, "val_dataloader", LightningDataModule) else \
                self.module if _overridden(self.module, "val_dataloader", LightningModule) else None
            if source is None:
                return []
            loaders = source.val_dataloader()
            return self._heldout_of(loaders[0] if isinstance(loaders, (list, tuple)) else loaders, max_samples)

        def optimizer_step(self):
            self.opt.step()
            self.stand_in.global_step += 1
            for s, interval, frequency in self.schedulers:
                if interval == "step" and self.stand_in.global_step % frequency == 0:
                    s.step()

    return register_as(name, LightningScenario, module, taps, num_classes, params)


def _limit(value, per_epoch):
    """limit_train_batches: an int (batches) or a float (a fraction of the epoch); None: whole."""
    if value is None:
        return 0
    if isinstance(value, float) and value <= 1.0:
        return max(int(per_epoch * value), 1)
    return int(value)
