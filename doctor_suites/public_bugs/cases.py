#!/usr/bin/env python3
"""Training bugs that were reported publicly, ported to spikehunt scenarios as
their authors wrote them (their own model classes, losses and data
pipelines), on real data (Fashion-MNIST, the fortunes' text), and healthy
programs for the false-alarm count. Each case names its source. The doctor's
top-ranked cause for each is pinned by tests/python/test_public_bugs.py;
suite.py runs them all and prints the table.

    python3 doctor_suites/public_bugs/cases.py doctor --config doctor_suites/public_bugs/public_bugs.json \\
        --set scenario='"functional_dropout_eval"'
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

try:
    from data import fashion_raw, text_bytes
except ImportError:  # imported as a module of the package's directory
    from .data import fashion_raw, text_bytes

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's pixel mean and std
TRAIN, TEST = 3000, 500


class Case(spikehunt.Scenario):
    """What the cases share, as a small training script would: batches drawn in a
    seeded order from (self.x, self.y), held-out data (self.xt, self.yt), a
    model self.net and an optimizer self.opt that the case builds."""
    epochs = 10
    classes = 10

    def __init__(self, config):
        super().__init__(config)
        self.done = 0
        self.generator = torch.Generator().manual_seed(config.seed)
        self.order = None

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def batches_per_epoch(self):
        return self.x.shape[0] // self.config.batch_size

    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        per_epoch, b = self.batches_per_epoch(), self.config.batch_size
        i = self.done % per_epoch
        if i == 0:
            self.order = torch.randperm(self.x.shape[0], generator=self.generator)
            self.on_epoch_start()
        self.done += 1
        idx = self.order[i * b:(i + 1) * b]
        return self.x[idx], self.y[idx]

    def on_epoch_start(self):
        pass

    def heldout(self, max_samples):
        return [(self.xt[:max_samples], self.yt[:max_samples])]

    def planned_steps(self):
        return self.epochs * self.batches_per_epoch()

    def num_classes(self):
        return self.classes


def fashion_normalized(flat=True, train=TRAIN, test=TEST):
    """Images as (x - mean) / std, flattened to 784 or (N, 1, 28, 28), and labels."""
    out = []
    for split, n in (("train", train), ("test", test)):
        x, y = fashion_raw(split, n)
        x = (x.float() / 255 - MEAN) / STD
        out += [x.reshape(n, -1) if flat else x.unsqueeze(1), y]
    return out


class MLP(nn.Module):
    def __init__(self, hidden=64, out=10, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def sgd(module_or_params, config):
    params = module_or_params.parameters() if isinstance(module_or_params, nn.Module) else module_or_params
    return torch.optim.SGD(params, lr=config.optimizer.lr, momentum=config.optimizer.momentum)


class FashionCase(Case):
    """A Fashion-MNIST classifier: standardized images (flattened unless `flat`
    is False), the model build() returns, SGD from the config."""
    flat = True
    train = TRAIN

    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = fashion_normalized(flat=self.flat, train=self.train)
        self.net = self.build()
        self.opt = sgd(self.net, config)

    def build(self):
        return MLP()


# ---------------------------------------------------------------- the model and its modes

class SimpleNetDropout(nn.Module):
    # Coderx7/SimpleNet#2 (https://github.com/Coderx7/SimpleNet/issues/2): F.dropout2d(out, 0.1,
    # training=True) after the global max pool in forward(): a trained network in eval mode gives a
    # different output on every run for the same example.
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.classifier = nn.Linear(16, 10)

    def forward(self, x):
        out = self.features(x)
        out = F.max_pool2d(out, kernel_size=out.size()[2:])
        out = F.dropout2d(out, 0.1, training=True)
        out = out.view(out.size(0), -1)
        return self.classifier(out)


class FunctionalDropoutEval(FashionCase):
    flat = False

    def build(self):
        return SimpleNetDropout()


class CausalSelfAttention(nn.Module):
    # karpathy/nanoGPT#240 (https://github.com/karpathy/nanoGPT/pull/240): the attention's dropout
    # was applied at evaluation time too ("calling functional directly considered dangerous").
    def __init__(self, d, block, dropout):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.dropout = dropout
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, block, block))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        att = (q @ k.transpose(1, 2)) / math.sqrt(d)
        att = att.masked_fill(self.mask[:, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        att = F.dropout(att, self.dropout)  # training defaults to True
        return self.proj(att @ v)


class TinyGPT(nn.Module):
    def __init__(self, attention, d=32, block=32, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = attention
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)


class TextCase(Case):
    """Next-byte prediction on the fortunes: windows of 32 bytes."""
    classes = 256
    block = 32

    def __init__(self, config):
        super().__init__(config)
        text = text_bytes()
        split = int(len(text) * 0.9)
        self.train_text, self.test_text = text[:split], text[split:]
        starts = torch.arange(0, 8 * 1024 * self.block, self.block) % (split - self.block - 1)
        self.x = torch.stack([self.train_text[s:s + self.block] for s in starts])
        self.y = torch.stack([self.train_text[s + 1:s + self.block + 1] for s in starts])
        ts = torch.arange(0, 256 * self.block, self.block)
        self.xt = torch.stack([self.test_text[s:s + self.block] for s in ts])
        self.yt = torch.stack([self.test_text[s + 1:s + self.block + 1] for s in ts])

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


class AttentionDropoutEval(TextCase):
    def __init__(self, config):
        super().__init__(config)
        self.net = TinyGPT(CausalSelfAttention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class EvalNeverUndone(FashionCase):
    # pytorch/tutorials#1624 (https://github.com/pytorch/tutorials/issues/1624): the quickstart's
    # test() calls model.eval() and train() never calls model.train(): from the second epoch on the
    # model trains in eval mode (its Dropout off).
    epochs = 20
    train = 640

    def build(self):
        return MLP(dropout=0.3)

    def on_epoch_start(self):
        if self.done:
            self.test()

    def test(self):
        self.net.eval()
        with torch.no_grad():
            correct = (self.net(self.xt).argmax(1) == self.yt).float().mean().item()
        self.last_accuracy = correct


class ValidationLeavesBatchNormFrozen(FashionCase):
    # huggingface/lerobot#3668 (https://github.com/huggingface/lerobot/issues/3668): eval_policy()
    # calls policy.eval() and never restores policy.train(): every later training step runs with
    # Dropout off and BatchNorm's running statistics frozen.
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(4),
                             nn.Flatten(), nn.Dropout(0.2), nn.Linear(8 * 7 * 7, 10))

    def next_batch(self):
        if self.done and self.done % 10 == 0:
            self.eval_policy()
        return super().next_batch()

    def eval_policy(self):
        self.net.eval()
        with torch.no_grad():
            self.val_accuracy = (self.net(self.xt[:100]).argmax(1) == self.yt[:100]).float().mean().item()


class ValidationWithoutTrainStart(FashionCase):
    # fartashf/vsepp#4 (https://github.com/fartashf/vsepp/issues/4): validate() calls
    # model.val_start() every val_step iterations, model.train_start() runs only at the start of an
    # epoch: the rest of the epoch trains with Dropout off.
    val_step = 8

    def build(self):
        return MLP(dropout=0.2)

    def on_epoch_start(self):
        self.net.train()  # train_start()

    def next_batch(self):
        if self.done and self.done % self.val_step == 0:
            self.net.eval()  # val_start()
            with torch.no_grad():
                self.net(self.xt[:100])
        return super().next_batch()


class SoftmaxOverBatch(FashionCase):
    # DeepReinforcementLearning/DeepReinforcementLearningInAction#32
    # (https://github.com/DeepReinforcementLearning/DeepReinforcementLearningInAction/issues/32):
    # torch.nn.Softmax(dim=0) at the end of the model: with a batch, the probabilities are computed
    # across the samples of the batch, not across the classes.
    def build(self):
        return nn.Sequential(nn.Linear(784, 64), nn.LeakyReLU(), nn.Linear(64, 10), nn.Softmax(dim=0))

    def loss(self, outputs, targets):
        return -torch.log(outputs[torch.arange(len(targets)), targets]).mean()


class LogSoftmaxOverBatch(FashionCase):
    # ctallec/world-models#10 (https://github.com/ctallec/world-models/issues/10): the mixture
    # weights' log_softmax is taken over the batch dimension (dim=-2) instead of the gaussians'.
    def forward(self, inputs):
        pi = self.net(inputs)
        return F.log_softmax(pi, dim=-2)

    def loss(self, outputs, targets):
        return F.nll_loss(outputs, targets)


class SoftmaxOneUnit(Case):
    # AyanKumarBhunia/Deep-One-Shot-Logo-Retrieval#7
    # (https://github.com/AyanKumarBhunia/Deep-One-Shot-Logo-Retrieval/issues/7): a softmax over the
    # single output unit of a binary classifier with binary cross-entropy ("use sigmoid instead").
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        x, y, xt, yt = fashion_normalized()
        keep, keep_t = y < 2, yt < 2  # T-shirt/top against trouser
        self.x, self.y, self.xt, self.yt = x[keep], y[keep].float().unsqueeze(1), xt[keep_t], yt[keep_t].float().unsqueeze(1)
        self.net = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 1), nn.Softmax(dim=1))
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.binary_cross_entropy(outputs, targets)


# ---------------------------------------------------------------- the loss

class SoftmaxThenCrossEntropy(FashionCase):
    # NaJaeMin92/pytorch-DANN#7 (https://github.com/NaJaeMin92/pytorch-DANN/issues/7): the
    # Classifier ends in a softmax layer and the loss is nn.CrossEntropyLoss, which applies its own.
    def build(self):
        return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=1))

    def __init__(self, config):
        super().__init__(config)
        self.criterion = nn.CrossEntropyLoss()

    def loss(self, outputs, targets):
        return self.criterion(outputs, targets)


class MatchingSoftmaxCrossEntropy(Case):
    # gitabcworld/MatchingNetworks#5 (https://github.com/gitabcworld/MatchingNetworks/issues/5):
    # AttentionalClassify applies a softmax to the similarities, then the loss applies cross_entropy
    # (log_softmax + NLL) to them: softmax twice.
    def __init__(self, config):
        super().__init__(config)
        self.x, self.y, self.xt, self.yt = fashion_normalized()
        self.embed = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 32))
        self.prototypes = nn.Parameter(torch.randn(10, 32))
        self.net = nn.ModuleDict({"embed": self.embed})
        self.net.register_parameter("prototypes", self.prototypes)
        self.opt = sgd(self.net, config)

    def forward(self, inputs):
        e = F.normalize(self.embed(inputs), dim=1)
        similarities = 10 * e @ F.normalize(self.prototypes, dim=1).t()
        return F.softmax(similarities, dim=1)

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets)


class NllOnSoftmax(FashionCase):
    # AnubhavGupta3377/Text-Classification-Models-Pytorch#9
    # (https://github.com/AnubhavGupta3377/Text-Classification-Models-Pytorch/issues/9): the model
    # ends in a softmax and the loss is nn.NLLLoss, which expects log-probabilities: "the loss is
    # always negative".
    def build(self):
        return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=1))

    def __init__(self, config):
        super().__init__(config)
        self.criterion = nn.NLLLoss()

    def loss(self, outputs, targets):
        return self.criterion(outputs, targets)


class NllOnScores(FashionCase):
    # yanx27/Pointnet_Pointnet2_pytorch#30 (https://github.com/yanx27/Pointnet_Pointnet2_pytorch/issues/30):
    # nll_loss on predictions that are not log_softmax outputs, "causing a negative label loss".
    def loss(self, outputs, targets):
        return F.nll_loss(outputs, targets)


class HandWrittenSoftmax(FashionCase):
    # pyg-team/pytorch_geometric#53 (https://github.com/pyg-team/pytorch_geometric/issues/53):
    # a softmax written as exp(x) / sum(exp(x)) "doing exp straightly cause overflow" -> NaN
    # (the fix subtracts the row max first).
    def loss(self, outputs, targets):
        out = outputs.exp()
        probs = out / out.sum(dim=1, keepdim=True)
        return -probs[torch.arange(len(targets)), targets].log().mean()


class LogOfSoftmaxProbabilities(FashionCase):
    # skorch-dev/skorch#481 (https://github.com/skorch-dev/skorch/issues/481): the module outputs
    # softmax probabilities and get_loss takes torch.log(y_pred) before NLLLoss, which "may cause
    # NaN" (log of a probability that underflowed to 0).
    def build(self):
        return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(dim=-1))

    def loss(self, outputs, targets):
        return F.nll_loss(torch.log(outputs), targets)


class HandWrittenBinaryCrossEntropy(Case):
    # huggingface/candle#2561 (https://github.com/huggingface/candle/issues/2561):
    # binary_cross_entropy_with_logit written as sigmoid, then log: a large logit's sigmoid is 1.0,
    # 1 - 1.0 is 0 and its log makes the loss non-finite.
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        x, y, xt, yt = fashion_normalized()
        keep, keep_t = (y == 5) | (y == 7), (yt == 5) | (yt == 7)  # sandal against sneaker
        self.x, self.y = x[keep], (y[keep] == 7).float().unsqueeze(1)
        self.xt, self.yt = xt[keep_t], (yt[keep_t] == 7).float().unsqueeze(1)
        self.net = MLP(out=1)
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        p = torch.sigmoid(outputs)
        return -(targets * torch.log(p) + (1 - targets) * torch.log(1 - p)).mean()


class SqueezedLogitsAgainstColumnLabels(Case):
    # deepset-ai/FARM#229 (https://github.com/deepset-ai/FARM/issues/229): a regression head whose
    # logits were squeezed to (32,) against labels of shape (32, 1): "Using a target size
    # (torch.Size([32, 1])) that is different to the input size (torch.Size([32]))".
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        # The regression target: how bright the garment is (the mean of its raw pixels).
        self.x, self.y = x, (x * STD + MEAN).mean(1, keepdim=True)
        self.xt, self.yt = xt, (xt * STD + MEAN).mean(1, keepdim=True)
        self.net = MLP(out=1)
        self.opt = sgd(self.net, config)

    def forward(self, inputs):
        return self.net(inputs).squeeze(-1)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class CriticAgainstUnreducedTarget(Case):
    # sunwuzhou03/reinforcement-learning-lab#1 (https://github.com/sunwuzhou03/reinforcement-learning-lab/issues/1):
    # F.mse_loss(critic(states, actions), td_target) with a critic of shape (64, 1) and a target of
    # (64, 4): log_prob was not summed over the action dimensions.
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(1234)
        def transitions(n):
            states = torch.randn(n, 12, generator=g)
            log_prob = -0.5 * torch.randn(n, 4, generator=g) ** 2 - 0.919
            reward = states[:, :3].sum(1, keepdim=True)
            td_target = reward - 0.2 * log_prob  # (n, 4): should be log_prob.sum(1, keepdim=True)
            return states, td_target
        self.x, self.y = transitions(2048)
        self.xt, self.yt = transitions(256)
        self.net = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 1))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=3e-4)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


# ---------------------------------------------------------------- the data pipeline

class AllLabelsZero(FashionCase):
    # btheodorou99/HALO_Inpatient#13 (https://github.com/btheodorou99/HALO_Inpatient/issues/13):
    # "all labels are 0 after build_dataset": the labels were added after the codes had been
    # converted to indices, so every lookup missed and fell back to 0.
    NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
             "Ankle boot"]

    def __init__(self, config):
        super().__init__(config)
        label_of = {name: i for i, name in enumerate(self.NAMES)}
        codes = [self.NAMES.index(self.NAMES[int(c)]) for c in self.y]  # the names, converted to indices
        self.y = torch.tensor([label_of.get(c, 0) for c in codes])  # looked up by name: always 0


class TestSetNotNormalized(FashionCase):
    # JeasunLok/ResNet-pytorch#1 (https://github.com/JeasunLok/ResNet-pytorch/issues/1): "the
    # normalization has been used in training set but not used in testing set".
    def __init__(self, config):
        super().__init__(config)
        xt, self.yt = fashion_raw("test", TEST)
        self.xt = xt.float().reshape(TEST, -1) / 255  # ToTensor() only


class FeaturesAndLabelsShuffledApart(FashionCase):
    # udacity/sdc-issue-reports#1326 (https://github.com/udacity/sdc-issue-reports/issues/1326):
    # "you can shuffle the features and labels separately (different shuffle orders)".
    def __init__(self, config):
        super().__init__(config)
        g = torch.Generator().manual_seed(7)
        self.x = self.x[torch.randperm(len(self.x), generator=g)]
        self.y = self.y[torch.randperm(len(self.y), generator=g)]


class LabelsOutOfRange(FashionCase):
    # TencentGameMate/gnn_cross_lingual#5 (https://github.com/TencentGameMate/gnn_cross_lingual/issues/5):
    # num_labels smaller than the labels the data holds: "IndexError: Target 12 is out of bounds".
    num_labels = 6

    def build(self):
        return MLP(out=self.num_labels)


class GrayscaleMaskTargets(Case):
    # milesial/Pytorch-UNet#291 (https://github.com/milesial/Pytorch-UNet/issues/291): masks loaded
    # as grayscale values (0..255) instead of class indices: "Target 192 is out of bounds".
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        raw, _ = fashion_raw("train", 1000)
        raw_t, _ = fashion_raw("test", 200)
        self.x, self.xt = ((raw.float() / 255 - MEAN) / STD).unsqueeze(1), ((raw_t.float() / 255 - MEAN) / STD).unsqueeze(1)
        self.y, self.yt = (raw > 128).long() * 255, (raw_t > 128).long() * 255  # the mask PNG's pixel values
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))
        self.opt = sgd(self.net, config)


# ---------------------------------------------------------------- the optimizer and its schedule

class SharedVaeOptimizer(FashionCase):
    # zdebruine/MMVAE#39 (https://github.com/zdebruine/MMVAE/issues/39): "The optimizer for the
    # shared VAE portion of the model is only being given the parameters of the encoder".
    def build(self):
        return nn.ModuleDict({"encoder": nn.Sequential(nn.Linear(784, 64), nn.ReLU()), "decoder": nn.Linear(64, 10)})

    def __init__(self, config):
        super().__init__(config)
        self.opt = sgd(self.net["encoder"], config)

    def forward(self, inputs):
        return self.net["decoder"](self.net["encoder"](inputs))


class SchedulerWithoutOptimizerStep(FashionCase):
    # pytorch/pytorch#3814 (https://github.com/pytorch/pytorch/issues/3814): only scheduler.step()
    # is called, taken for a wrapper that steps the optimizer: nothing trains ("I wondered why
    # nothing works, until I took a look on weights change between steps").
    def __init__(self, config):
        super().__init__(config)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.opt, step_size=30)

    def optimizer_step(self):
        self.scheduler.step()


class SchedulerSteppedPerBatch(FashionCase):
    # ivadomed/ivadomed#55 (https://github.com/ivadomed/ivadomed/pull/55): "Scheduler was
    # incorrectly stepped in the batch loop instead of in the epoch loop", decaying the learning
    # rate after each batch.
    def __init__(self, config):
        super().__init__(config)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.opt, step_size=10, gamma=0.1)  # every 10 epochs

    def optimizer_step(self):
        self.opt.step()
        self.scheduler.step()  # in the batch loop


class GradientsNeverZeroed(FashionCase):
    # yastrebksv/TennisCourtDetector#7 (https://github.com/yastrebksv/TennisCourtDetector/issues/7):
    # base_trainer.py never calls optimizer.zero_grad(): each step applies the sum of every gradient
    # so far. (spikehunt zeroes before backward; the running sum below is what the trainer applied.)
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr * 0.2)
        self.sums = [torch.zeros_like(p) for p in self.net.parameters()]

    def optimizer_step(self):
        for p, s in zip(self.net.parameters(), self.sums):
            s += p.grad
            p.grad.copy_(s)
        self.opt.step()


# ---------------------------------------------------------------- healthy programs

class HealthyMLP(FashionCase):
    def build(self):
        return MLP(hidden=128)


class HealthyCNN(FashionCase):
    """A CNN with BatchNorm and Dropout modules, switched by train()/eval() as intended."""
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Dropout(0.25), nn.Linear(16 * 7 * 7, 10))


class Attention(CausalSelfAttention):
    softmax_dim = -1  # over the keys

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        att = (q @ k.transpose(1, 2)) / math.sqrt(d)
        att = att.masked_fill(self.mask[:, :t, :t] == 0, float("-inf")).softmax(dim=self.softmax_dim)
        att = F.dropout(att, self.dropout, training=self.training)
        return self.proj(att @ v)


class HealthyGPT(TextCase):
    def __init__(self, config):
        super().__init__(config)
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class HealthyBinary(Case):
    """Sandal against sneaker: one logit, BCEWithLogitsLoss, targets shaped like the outputs."""
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        x, y, xt, yt = fashion_normalized()
        keep, keep_t = (y == 5) | (y == 7), (yt == 5) | (yt == 7)
        self.x, self.y = x[keep], (y[keep] == 7).float().unsqueeze(1)
        self.xt, self.yt = xt[keep_t], (yt[keep_t] == 7).float().unsqueeze(1)
        self.net = MLP(out=1)
        self.opt = sgd(self.net, config)
        self.criterion = nn.BCEWithLogitsLoss()

    def loss(self, outputs, targets):
        return self.criterion(outputs, targets)


class HealthyRegression(SqueezedLogitsAgainstColumnLabels):
    """The brightness regression with shapes that match: (N, 1) against (N, 1)."""
    def forward(self, inputs):
        return self.net(inputs)


class HealthyTwoOptimizers(FashionCase):
    """The body with SGD, the head with Adam: two declared optimizers."""
    def __init__(self, config):
        super().__init__(config)
        self.opt = {"body": torch.optim.SGD(self.net.fc1.parameters(), lr=config.optimizer.lr, momentum=0.9),
                    "head": torch.optim.Adam(self.net.fc2.parameters(), lr=config.optimizer.lr * 0.02)}


class HealthySecondOptimizerInStep(FashionCase):
    """Steps a second optimizer (the head's) inside its own optimizer_step() without declaring it:
    healthy, though spikehunt neither monitors nor checkpoints that optimizer."""
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.fc1.parameters(), lr=config.optimizer.lr, momentum=0.9)
        self.head_opt = torch.optim.Adam(self.net.fc2.parameters(), lr=config.optimizer.lr * 0.02)

    def optimizer_step(self):
        self.opt.step()
        self.head_opt.step()


BUGS = {
    "functional_dropout_eval": FunctionalDropoutEval,
    "attention_dropout_eval": AttentionDropoutEval,
    "eval_never_undone": EvalNeverUndone,
    "validation_leaves_batchnorm_frozen": ValidationLeavesBatchNormFrozen,
    "validation_without_train_start": ValidationWithoutTrainStart,
    "softmax_over_batch": SoftmaxOverBatch,
    "log_softmax_over_batch": LogSoftmaxOverBatch,
    "softmax_one_unit": SoftmaxOneUnit,
    "softmax_then_cross_entropy": SoftmaxThenCrossEntropy,
    "matching_softmax_cross_entropy": MatchingSoftmaxCrossEntropy,
    "nll_on_softmax": NllOnSoftmax,
    "nll_on_scores": NllOnScores,
    "hand_written_softmax": HandWrittenSoftmax,
    "log_of_softmax_probabilities": LogOfSoftmaxProbabilities,
    "hand_written_binary_cross_entropy": HandWrittenBinaryCrossEntropy,
    "squeezed_logits_against_column_labels": SqueezedLogitsAgainstColumnLabels,
    "critic_against_unreduced_target": CriticAgainstUnreducedTarget,
    "all_labels_zero": AllLabelsZero,
    "test_set_not_normalized": TestSetNotNormalized,
    "features_and_labels_shuffled_apart": FeaturesAndLabelsShuffledApart,
    "labels_out_of_range": LabelsOutOfRange,
    "grayscale_mask_targets": GrayscaleMaskTargets,
    "shared_vae_optimizer": SharedVaeOptimizer,
    "scheduler_without_optimizer_step": SchedulerWithoutOptimizerStep,
    "scheduler_stepped_per_batch": SchedulerSteppedPerBatch,
    "gradients_never_zeroed": GradientsNeverZeroed,
}
HEALTHY = {
    "healthy_mlp": HealthyMLP,
    "healthy_cnn": HealthyCNN,
    "healthy_gpt": HealthyGPT,
    "healthy_binary": HealthyBinary,
    "healthy_regression": HealthyRegression,
    "healthy_two_optimizers": HealthyTwoOptimizers,
    "healthy_second_optimizer_in_step": HealthySecondOptimizerInStep,
}
for _name, _cls in {**BUGS, **HEALTHY}.items():
    spikehunt.register(_name, _cls)

if __name__ == "__main__":
    spikehunt.main()
