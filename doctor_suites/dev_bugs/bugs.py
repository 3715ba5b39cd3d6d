#!/usr/bin/env python3
"""The doctor's development suite (issue 53): publicly reported training bugs of classes
in none of its other suites, ported as their authors wrote them on real data, and healthy
programs of shapes the other suites do not have. Written the honest way: each case and its
expected faulty part and cause (expected.py) were committed before the doctor first ran on
it, in batches, and each batch's first-run score is kept in docs/doctor.md.

    python3 doctor_suites/dev_bugs/bugs.py doctor --config doctor_suites/dev_bugs/dev_bugs.json \\
        --set scenario='"same_batch_every_step"'
"""
import copy
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import spikehunt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "public_bugs"))
from cases import MLP, Case, FashionCase, TextCase, fashion_normalized, sgd  # noqa: E402
from data import fashion_raw  # noqa: E402

FORTUNES = "/usr/share/games/fortunes"
CATEGORIES = ["computers", "definitions", "startrek", "zippy"]


def fortunes_by_category(length=96, test_share=0.15):
    """Each fortune of CATEGORIES' files as `length` bytes (cut, or padded with 0 after the
    text), its label the file's index; a seeded split into training and held-out sets."""
    xs, ys = [], []
    for label, name in enumerate(CATEGORIES):
        with open(os.path.join(FORTUNES, name), "rb") as f:
            for text in f.read().split(b"\n%\n"):
                text = text.strip()[:length]
                if len(text) < 8:
                    continue
                row = torch.zeros(length, dtype=torch.long)
                row[:len(text)] = torch.tensor(list(text), dtype=torch.long)
                xs.append(row)
                ys.append(label)
    x, y = torch.stack(xs), torch.tensor(ys)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    n_test = int(len(y) * test_share)
    return x[n_test:], y[n_test:], x[:n_test], y[:n_test]


class FortuneCase(Case):
    """Which file a fortune comes from (4 classes), from its first 96 bytes."""
    classes = len(CATEGORIES)
    epochs = 6

    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = fortunes_by_category()


def binary_fashion(a=5, b=7):
    """Sandal (0) against sneaker (1): flattened standardized images, float labels (N, 1)."""
    x, y, xt, yt = fashion_normalized()
    keep, keep_t = (y == a) | (y == b), (yt == a) | (yt == b)
    return x[keep], (y[keep] == b).float().unsqueeze(1), xt[keep_t], (yt[keep_t] == b).float().unsqueeze(1)


# ================================================================ batch 1
# ---------------------------------------------------------------- the data

class SameBatchEveryStep(FashionCase):
    # leohsuofnthu/Pytorch-IterativeFCN#7 (https://github.com/leohsuofnthu/Pytorch-IterativeFCN/issues/7):
    # "you use next(iter(train_loader)) to fetch the patches every iteration [...] next() would return
    # the first element of the iterator every time, which means during the whole iteration there is
    # only one subject used to training" (also skhu101/GM-NAS#4). An unshuffled DataLoader, a new
    # iterator every step.
    def __init__(self, config):
        super().__init__(config)
        dataset = torch.utils.data.TensorDataset(self.x, self.y)
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=config.batch_size, shuffle=False)

    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        self.done += 1
        return next(iter(self.loader))


class HeldoutClassOrderMismatch(FashionCase):
    # pytorch/vision#1150-style ImageFolder pitfall (class_to_idx is built from the folders present:
    # a validation folder missing one class numbers the rest differently), reported e.g. in
    # ultralytics/yolov5#2797 and many forum threads. The held-out labels come through a class map
    # that differs from the training one: class c of the held-out set is class (c + 1) % 10 in training.
    def __init__(self, config):
        super().__init__(config)
        self.yt = (self.yt - 1) % 10


# ---------------------------------------------------------------- the optimizer and its schedule

class WarmupNeverStepped(FashionCase):
    # huggingface/transformers#2331 (https://github.com/huggingface/transformers/issues/2331,
    # "Learning Rate is not being updated by the Scheduler", also pytorch/text#671): a linear warm-up
    # built with LambdaLR, whose first factor is 0, and scheduler.step() never called in the loop: the
    # learning rate stays at 0.
    def __init__(self, config):
        super().__init__(config)
        warmup = 100
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: s / warmup if s < warmup else 1.0)


class WeightDecayTypo(FashionCase):
    # The weight decay of a recipe read with the wrong exponent (charlesCXK/TorchSemiSeg#29 and
    # oval-group/smooth-topk#4 are such mix-ups between paper and config): SGD with weight_decay=5e-1
    # where the recipe says 5e-4. The decay term dominates the gradient.
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr, momentum=0.9, weight_decay=5e-1)


class AdamEpsilonOne(FashionCase):
    # TensorFlow's AdamOptimizer docstring ("when training an Inception network on ImageNet a current
    # good choice is 1.0 or 0.1", quoted in dgriff777/rl_a3c_pytorch#29) carried to another model;
    # mlpnlp/mlpnlp-nmt#4: "the training does not work well when using eps=0.1". Adam with eps=1.0:
    # the denominator is 1, every update is lr x the gradient's running mean.
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3, eps=1.0)


class PlateauModeMaxOnLoss(FashionCase):
    # FunctionLab/selene#115 (https://github.com/FunctionLab/selene/issues/115): "the learning rate
    # scheduler reduces LR when the maximum loss is not increased": ReduceLROnPlateau(mode="max")
    # given the loss (also RMeli/gnina-torch#57). Stepped with each batch's loss, patience 2.
    def __init__(self, config):
        super().__init__(config)
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(self.opt, mode="max", factor=0.1, patience=2)
        self.last_loss = None

    def loss(self, outputs, targets):
        loss = F.cross_entropy(outputs, targets)
        self.last_loss = loss.item()
        return loss

    def optimizer_step(self):
        self.opt.step()
        self.plateau.step(self.last_loss)


# ---------------------------------------------------------------- the step

class ZeroGradBetweenBackwardAndStep(FashionCase):
    # Tony-Y/pytorch_warmup#12 (https://github.com/Tony-Y/pytorch_warmup/issues/12): "Your code does
    # not optimize model parameters at all because optimizer.zero_grad() is called after
    # loss.backward()": loss.backward(); optimizer.zero_grad(); optimizer.step().
    def optimizer_step(self):
        self.opt.zero_grad()
        self.opt.step()


class ManualUpdateRebindsLocal(FashionCase):
    # A hand-written SGD step that rebinds the loop variable instead of changing the parameter
    # (jeromerony/fast_adversarial#3: "if you do the change on delta without calling data, the change
    # will not be in-place"; pytorch/examples#779 moved such an update to .data in place): the
    # optimizer is built, and the step written by hand.
    def optimizer_step(self):
        lr = self.opt.param_groups[0]["lr"]
        with torch.no_grad():
            for p in self.net.parameters():
                p = p - lr * p.grad  # noqa: F841  (a new tensor; the parameter keeps its value)


class Bf16WithoutMasterWeights(FashionCase):
    # workofart/ml-by-hand#85 (https://github.com/workofart/ml-by-hand/pull/85): "the optimizer's
    # update was computed in fp32 internally but written back to bf16 [...] after 100 times it's
    # still 1.0 [...] pre-fix (bf16 storage, no master): 0 / 768 moved" (also
    # vllm-project/speculators#765, NVIDIA-NeMo/Automodel#3444 at a fine-tuning rate). The model
    # cast to bfloat16 and trained with AdamW at 3e-5 on its own bfloat16 parameters.
    def build(self):
        return MLP().to(torch.bfloat16)

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 6e-4)

    def forward(self, inputs):
        return self.net(inputs.to(torch.bfloat16)).float()


class CheckpointedBlockWithoutGradInput(FashionCase):
    # pytorch/pytorch#7617 (https://github.com/pytorch/pytorch/issues/7617, "checkpoint(function,
    # *args) should has the same requires_grad as function(*args)"): torch.utils.checkpoint with
    # use_reentrant=True on a block whose input does not require grad (the first block, fed the
    # data) returns an output that does not require grad: the block's parameters get no gradient
    # (transformers' enable_input_require_grads exists for this).
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
                self.head = nn.Linear(64, 10)

            def forward(self, x):
                h = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=True)
                return self.head(h)
        return Net()


# ---------------------------------------------------------------- the initialization

class InitNormalStdOne(FashionCase):
    # AUTOMATIC1111/stable-diffusion-webui#4350 (layer weight initializations that ruin the network
    # "before it even starts learning" without a normalization layer) and VinceShieh/spark-ffm#12
    # ("Weight Initialisation might be a cause for loss NaN"): nn.init.normal_(weight) with its
    # default std of 1 on every Linear of a deep MLP, where the fan-in calls for about 1/sqrt(fan_in).
    def build(self):
        net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        for m in net.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight)
                nn.init.zeros_(m.bias)
        return net


class ZeroInitHidden(FashionCase):
    # The textbook pitfall (cs231n's "Pitfall: all zero initialization"; DeepFD's fault type "wrong
    # weight initialization"): every Linear, hidden ones included, initialized with nn.init.zeros_.
    def build(self):
        net = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
        for m in net.modules():
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.weight)
                nn.init.zeros_(m.bias)
        return net


# ---------------------------------------------------------------- the loss

class NllWithoutMinus(FashionCase):
    # A log-likelihood loss written by hand without its minus sign (the negative log-likelihood
    # maximized instead of minimized): loss = log_softmax(outputs)[label].mean(). Reported as
    # "the loss goes to minus infinity" in e.g. karpathy/micrograd-style ports and
    # pytorch/examples#(vae) threads; DeepFD's fault type "wrong loss function".
    def loss(self, outputs, targets):
        return F.log_softmax(outputs, dim=1).gather(1, targets.unsqueeze(1)).mean()


class KlDivOnProbabilities(FashionCase):
    # pytorch/pytorch#32520-style misuse of F.kl_div, whose input must be log-probabilities ("the
    # loss is negative", a recurrent question on the PyTorch forums and in distillation repos such as
    # peterliht/knowledge-distillation-pytorch#2): kl_div(softmax(outputs), one_hot(labels)).
    def loss(self, outputs, targets):
        return F.kl_div(F.softmax(outputs, dim=1), F.one_hot(targets, 10).float(), reduction="batchmean")


class ClassWeightsFromCounts(FashionCase):
    # Class weights meant to balance an imbalanced set, computed as the counts instead of their
    # inverse (e.g. ultralytics/yolov5#1238 "class weights inverted", a common forum report): on a
    # training set where class 0 holds 70% of the samples, CrossEntropyLoss(weight=counts / total)
    # pushes every prediction further toward it.
    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(7)
        zero = (self.y == 0).nonzero().flatten()
        rest = (self.y != 0).nonzero().flatten()
        rest = rest[torch.randperm(len(rest), generator=g)[:len(zero) * 9 // 7]]
        keep = torch.cat([zero.repeat(3), rest])  # class 0 repeated: 70% of the samples
        self.x, self.y = self.x[keep], self.y[keep]
        counts = torch.bincount(self.y, minlength=10).float()
        self.weight = counts / counts.sum()

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets, weight=self.weight)


class BinaryTargetsInverted(Case):
    # A binary target encoded the other way round in the loss (positive = 0): BCEWithLogits against
    # 1 - y while the data and the evaluation take y (e.g. scikit-learn's pos_label mix-ups carried
    # to PyTorch; Defects4ML's "wrong label encoding"). Sandal (0) against sneaker (1).
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = binary_fashion()
        self.net = MLP(out=1)
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.binary_cross_entropy_with_logits(outputs, 1 - targets)


# ---------------------------------------------------------------- the model

class InvertedCausalMask(TextCase):
    # A causal mask applied the wrong way round, masked_fill(mask == 1, -inf) with mask = tril:
    # each position attends to the positions after it, and the last one to none, whose softmax over
    # all -inf is NaN (e.g. rasbt/LLMs-from-scratch discussions of inverted masks, and
    # huggingface/transformers#5257 "attention mask inverted").
    def __init__(self, config):
        super().__init__(config)
        from cases import TinyGPT
        self.net = TinyGPT(InvertedMaskAttention(32, self.block))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class MaskedAttention(nn.Module):
    """Single-head self-attention whose scores go through `mask(scores, tril)` before the softmax (tril: the
    causal mask's ones, (1, block, block)); the cases below plant their bug in that function."""

    def __init__(self, d, block, mask):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mask = mask
        self.register_buffer("tril", torch.tril(torch.ones(block, block)).view(1, block, block))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        att = self.mask((q @ k.transpose(1, 2)) / math.sqrt(d), self.tril[:, :t, :t])
        return self.proj(att.softmax(dim=-1) @ v)


def InvertedMaskAttention(d, block):
    return MaskedAttention(d, block, lambda att, tril: att.masked_fill(tril == 1, float("-inf")))


class AdditiveBooleanMask(TextCase):
    # A 0/1 causal mask added to the attention scores (scores + mask) instead of masking with -inf:
    # adding 1 to the allowed positions masks nothing, and each position sees the token it predicts
    # (huggingface/transformers#542-style "the attention mask should be -10000 for masked positions",
    # a recurring question on converting boolean masks to additive ones).
    def __init__(self, config):
        super().__init__(config)
        from cases import TinyGPT
        self.net = TinyGPT(AdditiveMaskAttention(32, self.block))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


def AdditiveMaskAttention(d, block):
    return MaskedAttention(d, block, lambda att, tril: att + tril)


class ViewInsteadOfTranspose(Case):
    # view() used to move the time axis first for a sequence-first LSTM: x.view(T, B, F) on a
    # (B, T, F) batch reinterprets the memory instead of transposing, so every "sequence" mixes
    # rows of different samples (pytorch/pytorch#764-style reports; the forum answer "use permute or
    # transpose, not view"). Fashion-MNIST read row by row.
    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        self.x, self.xt = x.reshape(-1, 28, 28), xt.reshape(-1, 28, 28)

        class RowLstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(28, 64)
                self.fc = nn.Linear(64, 10)

            def forward(self, x):  # x: (batch, rows, pixels)
                b, t, f = x.shape
                out, _ = self.lstm(x.view(t, b, f))  # should be x.transpose(0, 1)
                return self.fc(out[-1])
        self.net = RowLstm()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class EpsOutsideSqrt(FortuneCase):
    # A layer norm written by hand with its epsilon outside the square root,
    # (x - mean) / sqrt(var) + eps: a row of zeros (here the padding bytes' embedding, padding_idx=0)
    # has var 0 and gives 0/0 = NaN (e.g. the fix in lucidrains/x-transformers' and many ports'
    # "move eps inside sqrt" commits).
    def __init__(self, config):
        super().__init__(config)

        class HandNorm(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(d))
                self.bias = nn.Parameter(torch.zeros(d))

            def forward(self, x):
                mean = x.mean(-1, keepdim=True)
                var = x.var(-1, keepdim=True, unbiased=False)
                return self.weight * (x - mean) / torch.sqrt(var) + 1e-5 + self.bias

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 32, padding_idx=0)
                self.norm = HandNorm(32)
                self.fc = nn.Linear(32, len(CATEGORIES))

            def forward(self, x):
                return self.fc(self.norm(self.emb(x)).mean(1))
        self.net = Net()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


# ---------------------------------------------------------------- the evaluation

class EmaEvaluatedTooEarly(FashionCase):
    # lucidrains/DALLE2-pytorch#131 (https://github.com/lucidrains/DALLE2-pytorch/issues/131): "the
    # EMA model seemingly refuses to learn [...] This issue also presents itself when running
    # evaluation on the EMA model" (answer: lower ema_beta); also fadel/pytorch_ema#15. The model
    # evaluates with an EMA copy of decay 0.9999, updated after every step: after a few hundred
    # steps it is still nearly the initialization.
    def build(self):
        class WithEma(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = MLP()
                self.ema = copy.deepcopy(self.net).requires_grad_(False)

            def forward(self, x):
                return self.net(x) if self.training else self.ema(x)
        return WithEma()

    def __init__(self, config):
        super().__init__(config)
        self.opt = sgd(self.net.net, config)

    def optimizer_step(self):
        self.opt.step()
        with torch.no_grad():
            for e, p in zip(self.net.ema.parameters(), self.net.net.parameters()):
                e.mul_(0.9999).add_(p, alpha=1e-4)


class DropoutRescaledAtEval(FashionCase):
    # A Caffe/TF1-style non-inverted dropout ported next to PyTorch's inverted one: nn.Dropout
    # already scales by 1/(1 - p) in training, and the ported code also multiplies by (1 - p) at
    # evaluation (tensorflow/tensorflow#8469-style "dropout at test time" confusion; the PyTorch
    # forum thread "Dropout scaling at inference"), so evaluation sees activations scaled by 1 - p.
    def build(self):
        class Net(nn.Module):
            def __init__(self, p=0.6):
                super().__init__()
                self.p = p
                self.fc1 = nn.Linear(784, 256)
                self.drop = nn.Dropout(p)
                self.fc2 = nn.Linear(256, 256)
                self.fc3 = nn.Linear(256, 10)

            def forward(self, x):
                h = self.drop(F.relu(self.fc1(x)))
                if not self.training:
                    h = h * (1 - self.p)
                h = self.drop(F.relu(self.fc2(h)))
                if not self.training:
                    h = h * (1 - self.p)
                return self.fc3(h)
        return Net()


# ================================================================ batch 2
# Written after batch 1 was improved on, before the doctor ran on these.

class SgdPositionalMomentumAsLr(FashionCase):
    # torch.optim.SGD's second positional argument is the learning rate: SGD(params, 0.9, 0.01), written for
    # "momentum 0.9, lr 0.01" (Keras-style argument order), trains at lr 0.9 with momentum 0.01 (a recurring
    # forum question, e.g. "SGD(model.parameters(), 0.9) does not converge"; DeepFD's "wrong learning rate").
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), 0.9, 0.01)


class GradClipMaxNormTiny(FashionCase):
    # clip_grad_norm_ given a max norm meant for something else (the learning rate, 1e-3): every step's
    # gradient is cut to norm 0.001, so nothing moves (AutoTrainer's "slow convergence" symptom; e.g.
    # Lightning-AI/pytorch-lightning#6131-style reports of a gradient_clip_val typo).
    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_norm=1e-3)
        self.opt.step()


class NormalizedIn255Units(FashionCase):
    # transforms.Normalize given the mean and std in 0..255 units after ToTensor() has already scaled the
    # pixels to 0..1 (pytorch/vision#1439-style reports; "Normalize((0.5*255,), (0.5*255,))"): every pixel
    # becomes about -1 +- 0.004, the images barely differ from one another.
    def __init__(self, config):
        super().__init__(config)
        raw, raw_t = self.x * 0.3530 + 0.2860, self.xt * 0.3530 + 0.2860  # ToTensor()'s 0..1
        self.x, self.xt = (raw - 0.2860 * 255) / (0.3530 * 255), (raw_t - 0.2860 * 255) / (0.3530 * 255)


class LstmReadsFirstTimestep(Case):
    # A sequence classifier reading the LSTM's output at the first time step, out[:, 0], where the summary
    # of the whole sequence is at the last one, out[:, -1] (e.g. bentrevett/pytorch-sentiment-analysis
    # issues on indexing the LSTM output; the first step has seen one row of the image).
    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        self.x, self.xt = x.reshape(-1, 28, 28), xt.reshape(-1, 28, 28)

        class RowLstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(28, 64, batch_first=True)
                self.fc = nn.Linear(64, 10)

            def forward(self, x):
                out, _ = self.lstm(x)
                return self.fc(out[:, 0])
        self.net = RowLstm()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class BatchNormMomentumZero(FashionCase):
    # BatchNorm1d(momentum=0.0), meant as "no momentum": PyTorch's momentum is the new batch's weight in the
    # running statistics, so 0 never updates them and evaluation normalizes with the initial mean 0 and
    # variance 1 (pytorch/pytorch#12356-style confusion about momentum's meaning).
    def build(self):
        return nn.Sequential(nn.Linear(784, 128), nn.BatchNorm1d(128, momentum=0.0), nn.ReLU(), nn.Linear(128, 10))


class WarmupLongerThanRun(FashionCase):
    # A linear warm-up counted in steps whose length was given in samples (or epochs x steps twice):
    # num_warmup_steps = 10,000 for a run of a few hundred steps, so the learning rate never gets past a few
    # percent of its peak (huggingface/transformers issues on warmup_steps larger than the training steps,
    # e.g. #6673).
    def __init__(self, config):
        super().__init__(config)
        warmup = 10_000
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warmup))

    def optimizer_step(self):
        self.opt.step()
        self.schedule.step()


class HiddenStateNotDetached(Case):
    # A stateful RNN language model that carries its hidden state from one batch to the next without
    # detaching it: the second backward runs into the first batch's freed graph ("Trying to backward through
    # the graph a second time"; pytorch/examples' word_language_model repackage_hidden exists for this,
    # pytorch/pytorch#2769).
    classes = 256

    def __init__(self, config):
        super().__init__(config)
        t = TextCase(config)
        self.x, self.y, self.xt, self.yt = t.x, t.y, t.xt, t.yt

        class Lm(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 32)
                self.rnn = nn.GRU(32, 64, batch_first=True)
                self.head = nn.Linear(64, 256)
                self.hidden = None

            def forward(self, x):
                if self.hidden is None or self.hidden.shape[1] != x.shape[0]:
                    self.hidden = torch.zeros(1, x.shape[0], 64)
                out, self.hidden = self.rnn(self.emb(x), self.hidden)  # carried, never detached
                return self.head(out)
        self.net = Lm()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, 256), targets.reshape(-1))


class CrossEntropyWithoutPermute(TextCase):
    # Per-token logits (batch, time, vocabulary) given to cross_entropy as they are: it takes the classes in
    # dimension 1, (batch, classes, time), and refuses the targets' shape (pytorch/pytorch#24227-style
    # "Expected target size" reports).
    def __init__(self, config):
        super().__init__(config)
        from cases import Attention, TinyGPT
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets)


class TargetsShiftedWrongWay(TextCase):
    # Next-token labels shifted the wrong way: targets[t] = inputs[t - 1], the previous token, which the model
    # has already seen, so it learns to copy from one position back (e.g. karpathy/nanoGPT and
    # huggingface/transformers discussions of label shifting; the mirror image of unshifted labels).
    def __init__(self, config):
        super().__init__(config)
        self.y = torch.cat([self.x[:, :1], self.x[:, :-1]], 1)
        self.yt = torch.cat([self.xt[:, :1], self.xt[:, :-1]], 1)
        from cases import Attention, TinyGPT
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class FreezeEverythingAfterFirstEpoch(FashionCase):
    # A fine-tuning schedule meant to freeze the body after the first epoch that freezes every parameter,
    # the head's too (for p in model.parameters(): p.requires_grad = False), so training stops after one
    # epoch (e.g. the "freeze backbone" loops of many fine-tuning repos that forget to re-enable the head).
    epochs = 4

    def on_epoch_start(self):
        if self.done > 0:
            for p in self.net.parameters():
                p.requires_grad = False


# ================================================================ batch 3
# Written after batches 1 and 2 were improved on, before the doctor ran on these.

class InplaceResidualAdd(FashionCase):
    # A residual added in place to an activation that autograd saved for its backward: tanh saves its
    # output, and h += x changes it ("one of the variables needed for gradient computation has been
    # modified by an inplace operation", pytorch/pytorch#15803-style reports).
    def build(self):
        class Block(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.fc = nn.Linear(d, d)

            def forward(self, x):
                h = torch.tanh(self.fc(x))
                h += x  # in place on tanh's saved output
                return h

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = nn.Linear(784, 64)
                self.block = Block(64)
                self.out = nn.Linear(64, 10)

            def forward(self, x):
                return self.out(self.block(self.inp(x)))
        return Net()


class InitInForward(FashionCase):
    # The weight initialization called from forward() instead of __init__ (self.apply(init_weights) moved
    # into forward while refactoring): every step starts again from freshly drawn weights, so whatever the
    # optimizer did is thrown away (e.g. reports of "model.apply(weights_init) inside the training loop").
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(784, 64)
                self.fc2 = nn.Linear(64, 10)

            @staticmethod
            def init_weights(m):
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    nn.init.zeros_(m.bias)

            def forward(self, x):
                if self.training:
                    with torch.no_grad():
                        self.apply(self.init_weights)
                return self.fc2(F.relu(self.fc1(x)))
        return Net()


class LabelEncodingPerBatch(FashionCase):
    # A label encoder fitted on each batch (scikit-learn's LabelEncoder().fit_transform inside the batch
    # loop): each batch numbers its classes by their order of first appearance in that batch, so a class id
    # means a different class from one batch to the next.
    def next_batch(self):
        b = super().next_batch()
        if b is None:
            return None
        x, y = b
        order = []
        for c in y.tolist():
            if c not in order:
                order.append(c)
        remap = {c: i for i, c in enumerate(order)}
        return x, torch.tensor([remap[c] for c in y.tolist()])


class PaddingMaskInverted(Case):
    # src_key_padding_mask given True for the real tokens (the Hugging Face attention_mask convention,
    # 1 = attend) where nn.Transformer* takes True for the positions to ignore: every real token is masked
    # out, and a sequence without padding has every position masked (pytorch/pytorch#41508-style reports).
    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        g = torch.Generator().manual_seed(3)
        self.x = HealthyPaddedTransformerEncoder.cut(x.reshape(-1, 14, 56), g)
        self.xt = HealthyPaddedTransformerEncoder.cut(xt.reshape(-1, 14, 56), g)

        class Encoder(nn.Module):
            def __init__(self, d=32):
                super().__init__()
                self.inp = nn.Linear(56, d)
                self.pos = nn.Parameter(torch.randn(1, 14, d) * 0.02)
                layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
                self.head = nn.Linear(d, 10)

            def forward(self, x):
                real = x[:, :, 56] == 1
                h = self.encoder(self.inp(x[:, :, :56]) + self.pos, src_key_padding_mask=real)  # should be ~real
                keep = real.unsqueeze(-1).float()
                return self.head((h * keep).sum(1) / keep.sum(1))
        self.net = Encoder()
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class NanInRegressionTargets(Case):
    # Regression targets read from a table with missing values (NaN) left in: the loss of any batch that
    # holds one is NaN from the first step (e.g. "loss is nan" threads that end in df.isna().sum()).
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        self.x, self.xt = x, xt
        self.y, self.yt = HealthyHuberRegression.targets(x), HealthyHuberRegression.targets(xt)
        g = torch.Generator().manual_seed(5)
        missing = torch.rand(self.y.shape[0], generator=g) < 0.03  # 3% of the rows
        self.y[missing, 0] = float("nan")
        self.net = MLP(hidden=64, out=2)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class AdamLrScaledByBatchSize(FashionCase):
    # The linear scaling rule applied to Adam by multiplying its learning rate by the batch size
    # (lr = 1e-3 * 64): Adam's steps are already the learning rate in size, so 0.064 throws the weights far
    # out of range within a few steps (Goyal et al.'s rule is for SGD; e.g. timm/lightning discussions of
    # "lr scaled by batch size" with Adam).
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-3 * config.batch_size)


class EvalBranchSkipsNormalization(FashionCase):
    # Input normalization written inside forward() under `if self.training:` together with the training-time
    # augmentation: evaluation feeds the raw 0..1 pixels the model never saw in training.
    def __init__(self, config):
        super().__init__(config)
        self.x, self.xt = self.x * 0.3530 + 0.2860, self.xt * 0.3530 + 0.2860  # the raw 0..1 pixels

    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = MLP()

            def forward(self, x):
                if self.training:
                    x = x + 0.01 * torch.randn_like(x)  # augmentation
                    x = (x - 0.2860) / 0.3530           # normalization, only here
                return self.body(x)
        return Net()


class LossMaskInverted(TextCase):
    # A language model's loss mask applied the wrong way round: targets set to -100 (ignored) where the
    # tokens are real and kept where they are padding, so the loss trains only on the padding (e.g. SFT
    # scripts' labels[attention_mask == 1] = -100 for labels[attention_mask == 0] = -100).
    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(11)

        def pad(x, y):
            lengths = torch.randint(self.block // 2, self.block + 1, (x.shape[0],), generator=g)
            real = torch.arange(self.block).unsqueeze(0) < lengths.unsqueeze(1)
            x = torch.where(real, x, torch.zeros_like(x))
            y = torch.where(real, torch.full_like(y, -100), torch.zeros_like(y))  # inverted: keeps the padding
            return x, y
        self.x, self.y = pad(self.x, self.y)
        self.xt, self.yt = self.xt, self.yt  # held-out next-token targets, unmasked
        from cases import Attention, TinyGPT
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1), ignore_index=-100)


class OptimizerFilterInverted(FashionCase):
    # The filter meant to keep only the trainable parameters written the wrong way round
    # (filter(lambda p: not p.requires_grad, model.parameters())): the optimizer gets none ("optimizer got an
    # empty parameter list").
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(filter(lambda p: not p.requires_grad, self.net.parameters()), lr=config.optimizer.lr)


class FinetuneLrDestroysPretrained(FashionCase):
    # Fine-tuning a pretrained model at a learning rate meant for training from scratch (0.5 with momentum):
    # the first steps throw away what the model knew, and held-out accuracy falls from where it started
    # (catastrophic forgetting by learning rate; e.g. the BERT fine-tuning threads on lr 1e-3 vs 2e-5).
    def build(self):
        return pretrained_teacher(self.x, self.y)

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr * 10, momentum=0.9)


# ================================================================ batch 4
# Written after batches 1 to 3 were improved on, before the doctor ran on these.

class LossMultipliedForPrecision(FashionCase):
    # The loss multiplied by 1,000 "to keep small gradients from underflowing" (a loss scaling done by hand,
    # outside AMP, and never undone): every gradient is 1,000x, and SGD at the usual rate blows up (e.g.
    # NVIDIA/apex and forum threads on manual loss scaling without unscaling).
    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets) * 1000


class BiasOnlyOptimizer(FashionCase):
    # Parameter groups meant to exempt the biases from weight decay, of which only the "no decay" group reached
    # the optimizer: it holds the biases alone and the weights never train (e.g. the no_decay lists of
    # fine-tuning scripts, huggingface/transformers#8179-style reports).
    def __init__(self, config):
        super().__init__(config)
        no_decay = [p for n, p in self.net.named_parameters() if n.endswith("bias")]
        self.opt = torch.optim.SGD([{"params": no_decay, "weight_decay": 0.0}], lr=config.optimizer.lr, momentum=0.9)


class ResidualBranchDetached(FashionCase):
    # .detach() written on the residual branch instead of on a logged copy: x + block(x).detach() adds the
    # branch's value and cuts its gradient, so the block never trains (e.g. "detach in the wrong place"
    # reports in research code).
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = nn.Linear(784, 64)
                self.block = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
                self.out = nn.Linear(64, 10)

            def forward(self, x):
                h = F.relu(self.inp(x))
                h = h + self.block(h).detach()
                return self.out(h)
        return Net()


class IntegerDivisionOfPixels(FashionCase):
    # uint8 pixels divided with // (integer division) instead of /: every pixel below 255 becomes 0, so the
    # images are almost all zeros (e.g. "x // 255 gives all zeros" reports; torch's floor division on integer
    # tensors).
    def __init__(self, config):
        super().__init__(config)
        raw, raw_t = fashion_raw("train", self.train)[0], fashion_raw("test", 500)[0]
        self.x = (raw // 255).float().reshape(self.train, -1)
        self.xt = (raw_t // 255).float().reshape(500, -1)


class SeedResetEveryStep(FashionCase):
    # torch.manual_seed(seed) called inside the batch loop (a "set_seed for reproducibility" in the wrong
    # place): every step draws the same permutation and so the same batch (e.g. reports of seeding inside
    # __getitem__ or the training loop).
    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        self.done += 1
        torch.manual_seed(self.config.seed)
        idx = torch.randperm(self.x.shape[0])[:self.config.batch_size]
        return self.x[idx], self.y[idx]


class TemperatureZero(FashionCase):
    # Logits divided by a temperature whose config default is 0 (meant as "off"): outputs / 0 is inf, and
    # the loss is NaN from the first step (e.g. sampling/distillation code with temperature=0.0 defaults).
    def build(self):
        class Net(nn.Module):
            def __init__(self, temperature=0.0):
                super().__init__()
                self.body = MLP()
                self.temperature = temperature

            def forward(self, x):
                return self.body(x) / self.temperature
        return Net()


class TargetInFeatures(Case):
    # Target leakage in tabular data: the column to predict left among the input features (the top-half
    # brightness is both the target and feature 784 here), so the model "predicts" it from itself and held-out
    # scores say nothing about the task (a leading data bug in Kaggle post-mortems; Defects4ML's data leakage).
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        y, yt = HealthyHuberRegression.targets(x), HealthyHuberRegression.targets(xt)
        self.y, self.yt = y[:, :1], yt[:, :1]
        self.x, self.xt = torch.cat([x, self.y], 1), torch.cat([xt, self.yt], 1)
        self.net = nn.Sequential(nn.Linear(785, 64), nn.ReLU(), nn.Linear(64, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class AuxiliaryLossWeightTypo(FashionCase):
    # A multi-task loss whose auxiliary term's weight was typed 100 for 0.01: an activation penalty on the
    # hidden features dominates the objective and drives them to zero before the classifier can use them.
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(784, 64)
                self.fc2 = nn.Linear(64, 10)
                self.features = None

            def forward(self, x):
                self.features = F.relu(self.fc1(x))
                return self.fc2(self.features)
        return Net()

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets) + 100 * self.net.features.square().mean()


class LearningRateTiny(FashionCase):
    # A learning rate typed 1e-6 for 1e-3: Adam's steps are a millionth of the weights' scale and nothing is
    # learned in any budget one runs (DeepFD's "wrong learning rate", AutoTrainer's "slow convergence").
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-6)


class BidirectionalLastStep(Case):
    # A bidirectional LSTM read at out[:, -1]: its forward half has seen the whole sequence there, its
    # backward half only the last element (the summary of the backward direction is at out[:, 0]; a PyTorch
    # forum classic, e.g. "BiLSTM output: use h_n, not out[:, -1]").
    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        self.x, self.xt = x.reshape(-1, 28, 28), xt.reshape(-1, 28, 28)

        class BiRowLstm(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(28, 32, batch_first=True, bidirectional=True)
                self.fc = nn.Linear(64, 10)

            def forward(self, x):
                out, _ = self.lstm(x)
                return self.fc(out[:, -1])
        self.net = BiRowLstm()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


# ================================================================ batch 5
# Written after batches 1 to 4 were improved on, before the doctor ran on these.

class FlattenMixesSamples(FashionCase):
    # A CNN's flatten written x.view(x.size(1), -1) (the channels where the batch size belongs): each "sample"
    # fed to the classifier is a slice across several images (pytorch forum "view vs flatten" threads).
    flat = False

    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Sequential(nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4))
                self.fc = nn.Linear(64 * 7 * 7, 10)

            def forward(self, x):
                h = self.conv(x)  # (B, 64, 7, 7)
                return self.fc(h.view(h.size(1), -1))  # should be h.view(h.size(0), -1)
        return Net()


class SoftmaxOnRegressionHead(Case):
    # A regression head copied from a classifier, softmax included: the two outputs always sum to 1, while the
    # targets (standardized brightness) do not (e.g. "my regression outputs sum to one" forum reports).
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        self.x, self.xt = x, xt
        self.y, self.yt = HealthyHuberRegression.targets(x), HealthyHuberRegression.targets(xt)
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 2), nn.Softmax(dim=1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class ThresholdInForward(Case):
    # A binary classifier that thresholds its own output inside forward() ((sigmoid(x) > 0.5).float(), written
    # for the metrics and left in the training path): the comparison has no gradient, so nothing trains.
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = binary_fashion()

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = MLP(out=1)

            def forward(self, x):
                return (torch.sigmoid(self.mlp(x)) > 0.5).float()
        self.net = Net()
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.binary_cross_entropy(outputs.clamp(1e-6, 1 - 1e-6).requires_grad_(), targets)


class CausalMaskOnQueryAxis(TextCase):
    # A causal mask of shape (T, 1) where (1, T) was meant (or the mask indexed by the query instead of the
    # key): it hides whole query rows early in the sequence and hides no key, so each position still sees the
    # tokens after it.
    def __init__(self, config):
        super().__init__(config)
        from cases import TinyGPT

        class QueryMaskAttention(nn.Module):
            def __init__(self, d, block):
                super().__init__()
                self.qkv = nn.Linear(d, 3 * d)
                self.proj = nn.Linear(d, d)
                self.register_buffer("first", (torch.arange(block) < 1).view(1, block, 1))  # masks query rows

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(x).split(d, dim=2)
                att = (q @ k.transpose(1, 2)) / math.sqrt(d)
                att = att.masked_fill(self.first[:, :t, :], -1e4).softmax(dim=-1)
                return self.proj(att @ v)
        self.net = TinyGPT(QueryMaskAttention(32, self.block))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class DropoutPAsPercent(FashionCase):
    # A dropout rate given in percent, nn.Dropout(50) for 50%: PyTorch refuses it ("dropout probability has to
    # be between 0 and 1, but got 50").
    def build(self):
        return MLP(dropout=50)


class ChannelsLastIntoConv(FashionCase):
    # Images kept channels-last, (batch, 28, 28, 1), as PIL/NumPy/TensorFlow give them, fed to a Conv2d that
    # takes (batch, channels, height, width): it reads 28 channels where it expects 1.
    flat = False

    def __init__(self, config):
        super().__init__(config)
        self.x, self.xt = self.x.permute(0, 2, 3, 1), self.xt.permute(0, 2, 3, 1)

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(),
                             nn.Linear(16 * 7 * 7, 10))


class Momentum0999(FashionCase):
    # SGD with momentum 0.999 (Adam's beta2 carried over, or 0.9 with a 9 too many): the buffer averages a
    # thousand steps and the effective step is lr / (1 - momentum) = 1000 x lr, which overshoots and oscillates.
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr, momentum=0.999)


class BceArgumentsSwapped(Case):
    # F.binary_cross_entropy(target, prediction): the arguments in the other order (scikit-learn's
    # log_loss(y_true, y_pred) habit); the prediction reaches the loss as the target, which autograd cannot
    # differentiate ("the derivative for 'target' is not implemented").
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = binary_fashion()
        self.net = nn.Sequential(MLP(out=1), nn.Sigmoid())
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.binary_cross_entropy(targets, outputs)


class ParamInTwoGroups(FashionCase):
    # Parameter groups built from overlapping filters (all parameters with a higher lr for the head, and the
    # head again in its own group): torch.optim refuses "some parameters appear in more than one parameter
    # group".
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD([{"params": list(self.net.parameters())},
                                    {"params": list(self.net.fc2.parameters()), "lr": 0.1}], lr=config.optimizer.lr)


class LossOnWrongHead(FashionCase):
    # A model with a main head and an auxiliary head whose loss is computed on the auxiliary output while
    # forward() returns (and evaluation reads) the main one: the main head is never trained.
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(784, 64), nn.ReLU())
                self.head = nn.Linear(64, 10)
                self.aux_head = nn.Linear(64, 10)
                self.aux = None

            def forward(self, x):
                h = self.body(x)
                self.aux = self.aux_head(h)
                return self.head(h)
        return Net()

    def loss(self, outputs, targets):
        return F.cross_entropy(self.net.aux, targets)  # should be outputs


# ================================================================ healthy programs

class HealthyPaddedTransformerEncoder(Case):
    """Fashion-MNIST images as a sequence of up to 14 tokens (two rows each), cut at a random length
    per image and padded with zeros, each token carrying a last column that is 1 for a real token and
    0 for padding; a transformer encoder layer with src_key_padding_mask, mean pooling over the real
    tokens."""

    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        g = torch.Generator().manual_seed(3)
        self.x, self.xt = self.cut(x.reshape(-1, 14, 56), g), self.cut(xt.reshape(-1, 14, 56), g)

        class Encoder(nn.Module):
            def __init__(self, d=32):
                super().__init__()
                self.inp = nn.Linear(56, d)
                self.pos = nn.Parameter(torch.randn(1, 14, d) * 0.02)
                layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
                self.head = nn.Linear(d, 10)

            def forward(self, x):  # (B, 14 tokens, 56 pixels + the real-token flag)
                pad = x[:, :, 56] == 0
                h = self.encoder(self.inp(x[:, :, :56]) + self.pos, src_key_padding_mask=pad)
                keep = (~pad).unsqueeze(-1).float()
                return self.head((h * keep).sum(1) / keep.sum(1))
        self.net = Encoder()
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    @staticmethod
    def cut(images, g):
        lengths = torch.randint(9, 15, (images.shape[0],), generator=g)
        real = (torch.arange(14).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (N, 14)
        return torch.cat([images * real.unsqueeze(-1), real.unsqueeze(-1)], 2)


class HealthyBf16AutocastCnn(FashionCase):
    """A CNN trained under torch.autocast(bfloat16) with fp32 parameters (mixed precision done right)."""
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def forward(self, inputs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.net(inputs).float()


class HealthyBiGruTagger(Case):
    """Per-position classification: a bidirectional GRU tags each byte of a fortune with whether it
    is an upper-case letter, a lower-case letter, a digit, white space or anything else (5 tags)."""
    classes = 5
    epochs = 4

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fortunes_by_category(length=32)
        self.x, self.xt = x, xt
        self.y, self.yt = self.tags(x), self.tags(xt)

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 16)
                self.gru = nn.GRU(16, 16, batch_first=True, bidirectional=True)
                self.out = nn.Linear(32, 5)

            def forward(self, x):
                h, _ = self.gru(self.emb(x))
                return self.out(h)
        self.net = Tagger()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.05)

    @staticmethod
    def tags(x):
        t = torch.full_like(x, 4)
        t[(x >= 97) & (x <= 122)] = 1
        t[(x >= 65) & (x <= 90)] = 0
        t[(x >= 48) & (x <= 57)] = 2
        t[(x == 32) | (x == 9) | (x == 10) | (x == 0)] = 3
        return t

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, 5), targets.reshape(-1))


class HealthyDeepMlpKaiming(FashionCase):
    """Eight hidden ReLU layers of 128 without normalization, Kaiming-normal weights and zero biases
    (the init that keeps a deep ReLU stack's activations at scale), SGD with momentum."""

    def build(self):
        layers, d = [], 784
        for _ in range(8):
            lin = nn.Linear(d, 128)
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
            layers += [lin, nn.ReLU()]
            d = 128
        return nn.Sequential(*layers, nn.Linear(128, 10))

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr * 0.2, momentum=0.9)


class HealthySlowTransformer(TextCase):
    """A small decoder at a learning rate that learns slowly: at the doctor's default length it is
    still near its starting loss, and learning."""

    def __init__(self, config):
        super().__init__(config)
        from cases import Attention, TinyGPT
        self.net = TinyGPT(Attention(32, self.block, 0.0))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.004)


class HealthyMultiLabel(Case):
    """Multi-label classification with BCEWithLogits: each image's labels are its class and the
    classes of its two neighbours in the label order (3 of 10 on)."""

    def __init__(self, config):
        super().__init__(config)
        self.x, y, self.xt, yt = fashion_normalized()
        self.y, self.yt = self.multi_hot(y), self.multi_hot(yt)
        self.net = MLP(hidden=128)
        self.opt = sgd(self.net, config)

    @staticmethod
    def multi_hot(y):
        t = torch.zeros(len(y), 10)
        for shift in (-1, 0, 1):
            t[torch.arange(len(y)), (y + shift) % 10] = 1
        return t

    def loss(self, outputs, targets):
        return F.binary_cross_entropy_with_logits(outputs, targets)


class HealthyHuberRegression(Case):
    """Regression of each image's mean brightness in its top and bottom halves (standardized), Huber
    loss, AdamW with weight decay 0.05 and a cosine schedule."""
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        self.x, self.xt = x, xt
        self.y, self.yt = self.targets(x), self.targets(xt)
        self.net = MLP(hidden=64, out=2)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02, weight_decay=0.05)
        self.schedule = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=self.planned_steps())

    @staticmethod
    def targets(x):
        img = x.reshape(-1, 28, 28)
        t = torch.stack([img[:, :14].mean((1, 2)), img[:, 14:].mean((1, 2))], 1)
        return (t - 0.03) / 0.55  # standardized by the training set's mean and std (measured: 0.03, 0.55)

    def loss(self, outputs, targets):
        return F.huber_loss(outputs, targets)

    def optimizer_step(self):
        self.opt.step()
        self.schedule.step()


class HealthyConvTextClassifier(FortuneCase):
    """Which file a fortune comes from, by an embedding, two 1-D convolutions and max pooling over
    the bytes, Adam."""

    def __init__(self, config):
        super().__init__(config)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(256, 32, padding_idx=0)
                self.conv1 = nn.Conv1d(32, 64, 5, padding=2)
                self.conv2 = nn.Conv1d(64, 64, 5, padding=2)
                self.fc = nn.Linear(64, len(CATEGORIES))

            def forward(self, x):
                h = self.emb(x).transpose(1, 2)
                h = F.relu(self.conv2(F.relu(self.conv1(h))))
                return self.fc(h.amax(2))
        self.net = Net()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.04)


_TEACHER = {}


def pretrained_teacher(x, y):
    """An MLP of 256 hidden units trained for 300 SGD steps on (x, y), once per process with its own
    seeds: the teacher a student is distilled from."""
    if "mlp" not in _TEACHER:
        with torch.random.fork_rng():
            torch.manual_seed(4321)
            net = MLP(hidden=256)
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
            g = torch.Generator().manual_seed(4321)
            for _ in range(300):
                idx = torch.randint(0, x.shape[0], (64,), generator=g)
                opt.zero_grad()
                F.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
        _TEACHER["mlp"] = {k: v.detach().clone() for k, v in net.state_dict().items()}
    net = MLP(hidden=256)
    net.load_state_dict(_TEACHER["mlp"])
    return net


class HealthyDistillation(FashionCase):
    """A small student distilled from a frozen pretrained teacher that lives inside the model (its
    parameters requires_grad=False): KL of the softened outputs (T = 2) plus cross-entropy."""

    def build(self):
        class Distilled(nn.Module):
            def __init__(self, teacher):
                super().__init__()
                self.student = MLP(hidden=32)
                self.teacher = teacher.requires_grad_(False)
                self.teacher_logits = None

            def forward(self, x):
                with torch.no_grad():
                    self.teacher_logits = self.teacher(x)
                return self.student(x)
        return Distilled(pretrained_teacher(self.x, self.y))

    def __init__(self, config):
        super().__init__(config)
        self.opt = sgd(self.net.student, config)

    def loss(self, outputs, targets):
        t = self.net.teacher_logits
        kd = F.kl_div(F.log_softmax(outputs / 2, 1), F.softmax(t / 2, 1), reduction="batchmean") * 4
        return 0.5 * kd + 0.5 * F.cross_entropy(outputs, targets)


class HealthyGroupNormOneCycle(FashionCase):
    """A CNN with GroupNorm and SiLU under OneCycleLR (warm-up from lr/25), whose scheduler, as
    PyTorch's does, refuses to step past the total it was built for."""
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr, momentum=0.9)
        self.schedule = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=config.optimizer.lr,
                                                            total_steps=self.planned_steps() + 1)

    def optimizer_step(self):
        self.opt.step()
        self.schedule.step()


class HealthyEmaEvaluation(FashionCase):
    """An MLP evaluated with an EMA copy of its weights, decay 0.9 updated after every step (an EMA
    whose window fits the run)."""

    def build(self):
        class WithEma(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = MLP()
                self.ema = copy.deepcopy(self.net).requires_grad_(False)

            def forward(self, x):
                return self.net(x) if self.training else self.ema(x)
        return WithEma()

    def __init__(self, config):
        super().__init__(config)
        self.opt = sgd(self.net.net, config)

    def optimizer_step(self):
        self.opt.step()
        with torch.no_grad():
            for e, p in zip(self.net.ema.parameters(), self.net.net.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)


BUGS = {
    "same_batch_every_step": SameBatchEveryStep,
    "heldout_class_order_mismatch": HeldoutClassOrderMismatch,
    "warmup_never_stepped": WarmupNeverStepped,
    "weight_decay_typo": WeightDecayTypo,
    "adam_epsilon_one": AdamEpsilonOne,
    "plateau_mode_max_on_loss": PlateauModeMaxOnLoss,
    "zero_grad_between_backward_and_step": ZeroGradBetweenBackwardAndStep,
    "manual_update_rebinds_local": ManualUpdateRebindsLocal,
    "bf16_without_master_weights": Bf16WithoutMasterWeights,
    "checkpointed_block_without_grad_input": CheckpointedBlockWithoutGradInput,
    "init_normal_std_one": InitNormalStdOne,
    "zero_init_hidden": ZeroInitHidden,
    "nll_without_minus": NllWithoutMinus,
    "kl_div_on_probabilities": KlDivOnProbabilities,
    "class_weights_from_counts": ClassWeightsFromCounts,
    "binary_targets_inverted": BinaryTargetsInverted,
    "inverted_causal_mask": InvertedCausalMask,
    "additive_boolean_mask": AdditiveBooleanMask,
    "view_instead_of_transpose": ViewInsteadOfTranspose,
    "eps_outside_sqrt": EpsOutsideSqrt,
    "ema_evaluated_too_early": EmaEvaluatedTooEarly,
    "dropout_rescaled_at_eval": DropoutRescaledAtEval,
    # batch 2
    "sgd_positional_momentum_as_lr": SgdPositionalMomentumAsLr,
    "grad_clip_max_norm_tiny": GradClipMaxNormTiny,
    "normalized_in_255_units": NormalizedIn255Units,
    "lstm_reads_first_timestep": LstmReadsFirstTimestep,
    "batchnorm_momentum_zero": BatchNormMomentumZero,
    "warmup_longer_than_run": WarmupLongerThanRun,
    "hidden_state_not_detached": HiddenStateNotDetached,
    "cross_entropy_without_permute": CrossEntropyWithoutPermute,
    "targets_shifted_wrong_way": TargetsShiftedWrongWay,
    "freeze_everything_after_first_epoch": FreezeEverythingAfterFirstEpoch,
    # batch 3
    "inplace_residual_add": InplaceResidualAdd,
    "init_in_forward": InitInForward,
    "label_encoding_per_batch": LabelEncodingPerBatch,
    "padding_mask_inverted": PaddingMaskInverted,
    "nan_in_regression_targets": NanInRegressionTargets,
    "adam_lr_scaled_by_batch_size": AdamLrScaledByBatchSize,
    "eval_branch_skips_normalization": EvalBranchSkipsNormalization,
    "loss_mask_inverted": LossMaskInverted,
    "optimizer_filter_inverted": OptimizerFilterInverted,
    "finetune_lr_destroys_pretrained": FinetuneLrDestroysPretrained,
    # batch 4
    "loss_multiplied_for_precision": LossMultipliedForPrecision,
    "bias_only_optimizer": BiasOnlyOptimizer,
    "residual_branch_detached": ResidualBranchDetached,
    "integer_division_of_pixels": IntegerDivisionOfPixels,
    "seed_reset_every_step": SeedResetEveryStep,
    "temperature_zero": TemperatureZero,
    "target_in_features": TargetInFeatures,
    "auxiliary_loss_weight_typo": AuxiliaryLossWeightTypo,
    "learning_rate_tiny": LearningRateTiny,
    "bidirectional_last_step": BidirectionalLastStep,
    # batch 5
    "flatten_mixes_samples": FlattenMixesSamples,
    "softmax_on_regression_head": SoftmaxOnRegressionHead,
    "threshold_in_forward": ThresholdInForward,
    "causal_mask_on_query_axis": CausalMaskOnQueryAxis,
    "dropout_p_as_percent": DropoutPAsPercent,
    "channels_last_into_conv": ChannelsLastIntoConv,
    "momentum_0999": Momentum0999,
    "bce_arguments_swapped": BceArgumentsSwapped,
    "param_in_two_groups": ParamInTwoGroups,
    "loss_on_wrong_head": LossOnWrongHead,
}
HEALTHY = {
    "healthy_padded_transformer_encoder": HealthyPaddedTransformerEncoder,
    "healthy_bf16_autocast_cnn": HealthyBf16AutocastCnn,
    "healthy_bigru_tagger": HealthyBiGruTagger,
    "healthy_deep_mlp_kaiming": HealthyDeepMlpKaiming,
    "healthy_slow_transformer": HealthySlowTransformer,
    "healthy_multi_label": HealthyMultiLabel,
    "healthy_huber_regression": HealthyHuberRegression,
    "healthy_conv_text_classifier": HealthyConvTextClassifier,
    "healthy_distillation": HealthyDistillation,
    "healthy_group_norm_one_cycle": HealthyGroupNormOneCycle,
    "healthy_ema_evaluation": HealthyEmaEvaluation,
}
for _name, _cls in {**BUGS, **HEALTHY}.items():
    spikehunt.register(_name, _cls)

if __name__ == "__main__":
    spikehunt.main()
