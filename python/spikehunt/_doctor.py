"""What the doctor asks of a Python scenario's torch.nn.Module (called from _core): re-initialize
it by each module's own reset_parameters(), and report every module's output in one forward pass."""
import torch


def reset_parameters(model):
    """Calls reset_parameters() of every submodule that has one (nn.MultiheadAttention's is
    _reset_parameters), in model order, in place; returns the names of those it reset."""
    reset = []
    with torch.no_grad():
        for name, module in model.named_modules():
            fn = getattr(module, "reset_parameters", None) or getattr(module, "_reset_parameters", None)
            if name and callable(fn):
                fn()
                reset.append(name)
    return reset


def _finite(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() and v.numel() and not torch.isfinite(v).all():
                return False
        elif isinstance(v, (tuple, list)):
            if not _finite(v):
                return False
        elif isinstance(v, dict):
            if not _finite(v.values()):
                return False
    return True


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        for o in output:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def _fan_in(module):
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2:
        return 0
    if isinstance(module, torch.nn.Linear):
        return weight.shape[1]
    if isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
        return weight[0].numel()
    return 0


def _rms(values):
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel():
            x = v.detach().double()
            x = x[torch.isfinite(x)]
            return float(x.square().mean().sqrt()) if x.numel() else float("nan")
    return float("nan")


def module_outputs(model, forward, inputs):
    """Runs forward(inputs) without gradients with a forward hook on every submodule of model (the
    root included, named "") and returns, in the order the modules finished, one tuple each:
    (name, class, inputs finite, numel, non-finite count, rms, max |x|, input rms, fan-in, weight std, NaN count,
    +Inf count, -Inf count)."""
    rows = []

    def hook(name):
        def record(module, args, output):
            t = _first_tensor(output)
            if t is None or not t.is_floating_point() or t.numel() == 0:
                return
            x = t.detach().double()
            finite = torch.isfinite(x)
            good = x[finite]
            n = x.numel()
            fan_in = int(_fan_in(module))
            rows.append((name, type(module).__name__, _finite(args), n, int(n - int(finite.sum())),
                         float(good.square().mean().sqrt()) if good.numel() else 0.0,
                         float(good.abs().max()) if good.numel() else 0.0, _rms(args), fan_in,
                         float(module.weight.detach().double().std()) if fan_in else float("nan"),
                         int(torch.isnan(x).sum()), int(torch.isposinf(x).sum()), int(torch.isneginf(x).sum())))
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules()]
    try:
        with torch.no_grad():
            forward(inputs)
    finally:
        for h in handles:
            h.remove()
    return rows
