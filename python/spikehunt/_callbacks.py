"""What the framework callbacks (lightning.py, hf.py) share: one state machine over a Watch,
fed by each framework's own hooks.

A micro-batch's step begins with its forward (taps go to the monitor as the forward makes
them) unless gradients accumulate over several micro-batches, which are then kept and replayed
together before the optimizer's step; the loss follows the forward, the gradients are read
before the optimizer's step and the record after it. A watch that ends (non-finite, or
fail-fast) asks the framework to stop training when `stop` is set. A subclass says how its
framework stops (`_stop_training`) and calls the steps below from its hooks.
"""
from .watch import Watch


class WatchedSteps:
    def __init__(self, options, stop):
        self._options = options
        self._stop = stop
        self.watch = None
        self.path = None
        self._accumulate = 1
        self._pending = None  # with accumulation: the micro-batch under way, and those done
        self._micro = []

    def _start(self, model, optimizers, planned_steps, accumulate):
        """A fit begins: a Watch of its own (a callback used for a second fit closes the first's)."""
        self._close()
        self.path, self._micro, self._pending = None, [], None
        self._accumulate = int(accumulate)
        self.watch = Watch(model, optimizers, planned_steps=int(planned_steps), **self._options)

    def _batch(self, inputs):
        """A micro-batch (inputs, targets) is about to run its forward."""
        if self._accumulate == 1 and not self.watch.live:
            self._ended(self.watch.begin([inputs]))
        else:
            self._pending = inputs

    def _loss(self, loss, outputs=None):
        """Its forward gave `loss`; the outputs: `outputs`, else the root module's, else the loss."""
        root, taps = self.watch.take_forward(loss.detach())
        outputs = root if outputs is None else outputs
        if self.watch.live:
            self._ended(self.watch.forward(outputs, loss))
        elif self._pending is not None:
            self._micro.append((*self._pending, outputs, loss, taps))
            self._pending = None

    def _before_step(self, backward=True):
        """Right before the optimizer's step; `backward`: a backward ran this step (else the step changes
        nothing and is no step of the trace)."""
        if self._micro:
            micro, self._micro = self._micro, []
            if self._ended(self.watch.replay(micro)):
                return
        if self.watch.live and not backward:
            self.watch.abandon()
        elif self.watch.live:
            self._ended(self.watch.after_backward())

    def _after_step(self):
        if self.watch is not None and self.watch.live:
            self._ended(self.watch.finish())

    def _ended(self, record):
        """True when the step ended (training stops if the watch ended)."""
        if record is not None and self.watch.ended is not None and self._stop:
            self._stop_training()
        return record is not None

    def _stop_training(self):
        raise NotImplementedError

    def _close(self):
        if self.watch is not None and not self.watch.closed:
            self.path = self.watch.close()
            if self.watch.rank == 0:  # under data-parallel training, every rank recorded the global steps
                print(f"spikehunt: {self.watch.text()}\nspikehunt: results in {self.path}", flush=True)
