#!/usr/bin/env python3
"""The doctor's second suite: publicly reported training bugs of classes that are
in none of its other suites (doctor_suites/public_bugs, the planted Fashion-MNIST and
C++ bugs), ported as their authors wrote them, and healthy programs of ordinary
shapes for the false-alarm count. The doctor was not tuned on these: each case's
expected cause (suite.py's EXPECTED) was written before the doctor first ran on
it, and that first run's score is kept in docs/doctor.md.

    python3 doctor_suites/unseen_bugs/bugs.py doctor --config doctor_suites/unseen_bugs/unseen_bugs.json \\
        --set scenario='"loss_summed_over_batch"'
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "public_bugs"))
from cases import MEAN, MLP, STD, Attention, Case, FashionCase, TextCase, TinyGPT, fashion_normalized, sgd  # noqa: E402


# ---------------------------------------------------------------- the loss against the batch

class LossSummedOverBatch(FashionCase):
    # jax-ml/jax#3113 (https://github.com/jax-ml/jax/pull/3113): "Loss was calculated using np.sum
    # without accounting for the number of samples. This worked for the batch size of 128 in
    # combination with the low learning rate but lead to exploding gradients for larger batches."
    # The same in PyTorch: reduction="sum" with a learning rate chosen for the mean.
    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets, reduction="sum")


# ---------------------------------------------------------------- the outputs against the loss

class SigmoidBeforeBceWithLogits(Case):
    # yudi-mars/daisyRec#15 (https://github.com/yudi-mars/daisyRec/pull/15): "Do not need sigmoid
    # because there is sigmoid in BCEWithLogitsLoss. Otherwise loss does not converge." (also
    # Lightning-AI/pytorch-lightning#18272). Sandal against sneaker, one output unit.
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        x, y, xt, yt = fashion_normalized()
        keep, keep_t = (y == 5) | (y == 7), (yt == 5) | (yt == 7)
        self.x, self.y = x[keep], (y[keep] == 7).float().unsqueeze(1)
        self.xt, self.yt = xt[keep_t], (yt[keep_t] == 7).float().unsqueeze(1)
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 1), nn.Sigmoid())
        self.opt = sgd(self.net, config)
        self.criterion = nn.BCEWithLogitsLoss()

    def loss(self, outputs, targets):
        return self.criterion(outputs, targets)


class ReluBeforeCrossEntropy(FashionCase):
    # pytorch/tutorials#1644 (https://github.com/pytorch/tutorials/pull/1644, issue #1526): the
    # quickstart's NeuralNetwork ended in nn.ReLU() after its last Linear, "just before the cross
    # entropy error was calculated".
    def build(self):
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 10), nn.ReLU())


# ---------------------------------------------------------------- samples mixed with each other

class LstmWithoutBatchFirst(Case):
    # AndersonJo/dqn-pytorch#1 (https://github.com/AndersonJo/dqn-pytorch/issues/1): "The semantics
    # of LSTM input are (seq_len, batch_size, input_size). But the input format is (batch_size,
    # seq_len, input_size). To correct it batch_first needs to be passed True" ("Astonishing part
    # is model is still learning with this error"; also Cadene/vqa.pytorch#40). Fashion-MNIST read
    # row by row, 28 steps of 28 pixels: the LSTM runs over the batch as if it were time.
    def __init__(self, config):
        super().__init__(config)
        x, self.y, xt, self.yt = fashion_normalized()
        self.x, self.xt = x.reshape(-1, 28, 28), xt.reshape(-1, 28, 28)
        self.net = RowLstm(batch_first=False)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class RowLstm(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.lstm = nn.LSTM(28, 64, batch_first=batch_first)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):  # x: (batch, 28 rows, 28 pixels)
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


# ---------------------------------------------------------------- the data as batches arrive

class BatchesSortedByClass(FashionCase):
    # Deci-AI/super-gradients#416 (https://github.com/Deci-AI/super-gradients/issues/416): "By
    # default, it does not pass shuffle=True to the dataloader, so SequentialSampler gets
    # instantiated. In training on Imagenet it makes NN see only examples of a single class"
    # (also pytorch/vision#7818: a dataset stored class by class). The training set as stored,
    # sorted by class, read in order.
    def __init__(self, config):
        super().__init__(config)
        order = torch.argsort(self.y, stable=True)
        self.x, self.y = self.x[order], self.y[order]

    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        b = self.config.batch_size
        i = self.done % self.batches_per_epoch()
        self.done += 1
        return self.x[i * b:(i + 1) * b], self.y[i * b:(i + 1) * b]


# ---------------------------------------------------------------- the parameters at step 0

class ConstantInit(FashionCase):
    # HomericIntelligence/Mnemosyne#1987 (https://github.com/HomericIntelligence/Mnemosyne/pull/1987):
    # "uniform-fill weight init in multi-layer test cases causes upstream gradients to collapse [...]
    # producing convergence-test plateaus at ln(num_classes)". Every weight filled with one value.
    def build(self):
        net = MLP(hidden=64)
        for m in net.modules():
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, 0.01)
                nn.init.zeros_(m.bias)
        return net


# ---------------------------------------------------------------- the modes

class BatchNormOnBatchesOfOne(FashionCase):
    # microsoft/CNTK#905 (https://github.com/microsoft/CNTK/issues/905): the BatchNorm MNIST
    # example with minibatchSize 1 "delivers no useful result at all (error rate > 50%)", where
    # the same network without BatchNorm trains at batch 1. The same in PyTorch: BatchNorm2d
    # (whose statistics over 28x28 positions exist for one image) trained one image at a time.
    flat = False
    train = 1500
    epochs = 1

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16 * 7 * 7, 10))

    def batches_per_epoch(self):
        return self.x.shape[0]

    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        if self.done % self.batches_per_epoch() == 0:
            self.order = torch.randperm(self.x.shape[0], generator=self.generator)
        i = self.order[self.done % self.batches_per_epoch()]
        self.done += 1
        return self.x[i:i + 1], self.y[i:i + 1]


# ---------------------------------------------------------------- what the targets are

class LmLabelsNotShifted(TextCase):
    # KempnerInstitute/KempnerForge#154 (https://github.com/KempnerInstitute/KempnerForge/issues/154):
    # "labels[i] == input_ids[i], but the loss doesn't shift [...] each logit is scored against the
    # current, already-visible token — the model copies it and loss collapses to 0.0000" (also
    # macrocosm-os/pretraining#64). The targets are the input window itself.
    def __init__(self, config):
        super().__init__(config)
        self.y, self.yt = self.x.clone(), self.xt.clone()
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class UnmaskedSelfAttention(nn.Module):
    def __init__(self, d, block, dropout):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        att = ((q @ k.transpose(1, 2)) / math.sqrt(d)).softmax(dim=-1)  # no causal mask
        att = F.dropout(att, self.dropout, training=self.training)
        return self.proj(att @ v)


class CausalMaskMissing(TextCase):
    # huggingface/transformers#48745 (https://github.com/huggingface/transformers/issues/48745):
    # four *ForCausalLM models "attend to future tokens [...] the loss fell to almost zero within a
    # few hundred steps on random tokens. The decoder is not causal: each position sees the tokens
    # after it, so its label is visible." (also rainmaker22/SMART#42). A decoder whose attention
    # has no mask.
    def __init__(self, config):
        super().__init__(config)
        self.net = TinyGPT(UnmaskedSelfAttention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


# ---------------------------------------------------------------- the second batch (added after the first nine were fixed)

class DropoutKeepProbAsP(FashionCase):
    # hassony2/kinetics_i3d_pytorch#6 (https://github.com/hassony2/kinetics_i3d_pytorch/issues/6):
    # "it says dropout_keep_prob=1 but in the PyTorch documentation p is the probability of an
    # element to be zeroed" (also piergiaj/pytorch-i3d#58). A TensorFlow keep probability handed to
    # nn.Dropout as its p.
    def build(self):
        dropout_keep_prob = 1.0
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Dropout(dropout_keep_prob), nn.Linear(128, 10))


class PadTokensInLoss(TextCase):
    # lukas-blecher/LaTeX-OCR#305 (https://github.com/lukas-blecher/LaTeX-OCR/issues/305): "the
    # default value is -100, but [PAD] token's index = 0": the cross-entropy counts the padding
    # positions, and "the model learns to predict PAD tokens". Sentences of the fortunes, each
    # right-padded with 0 to the window, their targets padded the same.
    def __init__(self, config):
        super().__init__(config)
        text = self.train_text
        starts = (text == ord("\n")).nonzero().flatten()[:4097]
        rows, targets = [], []
        for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
            line = text[a + 1:b + 1][: self.block + 1]
            padded = torch.zeros(self.block + 1, dtype=torch.long)
            padded[: len(line)] = line
            rows.append(padded[:-1])
            targets.append(padded[1:])
        self.x, self.y = torch.stack(rows), torch.stack(targets)
        self.net = TinyGPT(Attention(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def loss(self, outputs, targets):  # ignore_index left at its default, -100
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.block = nn.Sequential(nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, x):
        return x + self.block(x)


class ResidualStackSharedByListMultiplication(FashionCase):
    # zalandoresearch/pytorch-vq-vae#2 (https://github.com/zalandoresearch/pytorch-vq-vae/issues/2):
    # "nn.ModuleList([Residual(...)] * self._num_residual_layers) duplicates a reference to a single
    # Residual object instance" ("I think its a bug"; also deep-learning-with-pytorch/dlwpt-code#89).
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = nn.Linear(784, 64)
                self.layers = nn.ModuleList([Residual(64)] * 4)
                self.out = nn.Linear(64, 10)

            def forward(self, x):
                h = self.inp(x)
                for layer in self.layers:
                    h = layer(h)
                return self.out(F.relu(h))
        return Net()


# ---------------------------------------------------------------- the third batch (added after the first twelve were fixed)

class ModelInstantiatedTwice(FashionCase):
    # spro/practical-pytorch#9 (https://github.com/spro/practical-pytorch/issues/9): "I have the model
    # instantiated twice - once directly after the RNN class, and once before the main `for epoch in
    # ...` loop [...] Try moving the optimizer to below the second one, so the params aren't reset."
    # The optimizer is built over the first instance; the script trains the second.
    def __init__(self, config):
        super().__init__(config)  # self.net and the optimizer over it
        self.net = self.build()   # the model instantiated again, further down the script


class RepeatedWorkerBatches(FashionCase):
    # pytorch/pytorch#41329 (https://github.com/pytorch/pytorch/issues/41329): an IterableDataset
    # drawing with numpy.random inside DataLoader workers: "for each worker, I noticed the sequence of
    # values returned by numpy.random functions is exactly the same" (also pytorch/pytorch#5059,
    # facebookresearch/fairseq#1383: "this results in a lots of duplication"). Four workers forked
    # with one numpy state draw the same batches, and the loader takes them in turn.
    workers = 4

    def __init__(self, config):
        super().__init__(config)
        import numpy as np
        self.worker_rngs = [np.random.RandomState(config.seed) for _ in range(self.workers)]  # forked copies

    def next_batch(self):
        if self.done == self.planned_steps():
            return None
        rng = self.worker_rngs[self.done % self.workers]
        self.done += 1
        idx = torch.from_numpy(rng.randint(0, self.x.shape[0], size=self.config.batch_size))
        return self.x[idx], self.y[idx]


class SigmoidOutputForSignedTargets(Case):
    # FenTechSolutions/CausalDiscoveryToolbox#12 (https://github.com/FenTechSolutions/CausalDiscoveryToolbox/issues/12):
    # "It is written in the code that it outputs 1 or -1 but sigmoid has been used which outputs
    # between 0 and 1" ("I'm getting the same output for every input"). Sandal against sneaker with
    # targets -1 and +1, a sigmoid output and the mean squared error.
    classes = 2

    def __init__(self, config):
        super().__init__(config)
        x, y, xt, yt = fashion_normalized()
        keep, keep_t = (y == 5) | (y == 7), (yt == 5) | (yt == 7)
        self.x, self.y = x[keep], ((y[keep] == 7).float() * 2 - 1).unsqueeze(1)
        self.xt, self.yt = xt[keep_t], ((yt[keep_t] == 7).float() * 2 - 1).unsqueeze(1)
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 1), nn.Sigmoid())
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class BnCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


class FrozenByNameFilter(FashionCase):
    # TrainCheck's pytorch-forum-84911 (https://discuss.pytorch.org/t/obtaining-abnormal-changes-in-loss-and-accuracy/84911,
    # reproduced in OrderLab/TrainCheck-Evaluation-Workloads): "All major layers of the model are
    # frozen. The only trainable layers are the batch normalization layers": `if "bn" not in name:
    # param.requires_grad = False`, then the classifier `_fc` frozen too.
    flat = False

    def build(self):
        net = BnCnn()
        for name, param in net.named_parameters():
            if "bn" not in name:
                param.requires_grad = False
        for param in net.fc.parameters():
            param.requires_grad = False
        return net


class LossRebuiltFromItem(FashionCase):
    # isayev/ReLeaSE#39 (https://github.com/isayev/ReLeaSE/issues/39): "rl_loss -= (log_probs[0,
    # top_i].item()*discounted_reward) [...] I printed out the grad for each of the layers and it comes
    # back as none [...] the weights are not updating" ("your changes detach rl_loss from the
    # computational graph and there is nothing to backpropagate"). The loss summed from .item()s
    # into a tensor that requires grad, so backward() runs.
    def loss(self, outputs, targets):
        log_probs = F.log_softmax(outputs, dim=1)
        loss = torch.zeros((), requires_grad=True)
        for i in range(targets.shape[0]):
            loss = loss - log_probs[i, targets[i]].item()
        return loss / targets.shape[0]


class UnnormalizedRegressionTargets(Case):
    # rstudio-conf-2020/dl-keras-tf#9 (https://github.com/rstudio-conf-2020/dl-keras-tf/issues/9):
    # "loss values appear to be nan when the loss parameter is set to mean_squared_error [...] related
    # to the range of the predicted value (sales price) which reaches ~ 755000". The target here: the
    # total ink of a garment (the sum of its raw pixels, up to ~200,000), regressed as it is.
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        self.x, self.y = x, ((x * STD + MEAN) * 255).sum(1, keepdim=True)
        self.xt, self.yt = xt, ((xt * STD + MEAN) * 255).sum(1, keepdim=True)
        self.net = MLP(out=1)
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


# ---------------------------------------------------------------- the fourth batch (added after the first eighteen were fixed)

class SigmoidBeforeCrossEntropy(FashionCase):
    # opendataval/opendataval#25 (https://github.com/opendataval/opendataval/issues/25): "have been
    # added sigmoid function at the end (x = F.sigmoid(x)), then use crossentropy function as
    # criterion [...] this will affect the performance". A logistic regression over 10 classes.
    def build(self):
        class LogisticRegression(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(784, 10)

            def forward(self, x):
                return F.sigmoid(self.linear(x))
        return LogisticRegression()


class ReluOnRegressionOutput(Case):
    # ProteomicsML/ProteomicsML#203 (https://github.com/ProteomicsML/ProteomicsML/pull/203): "I got
    # LSTM network returning constantly 0 for all peptides in validation set. The reason seems to be
    # using ReLU activation at the final linear layer". Standardized targets (half of them below 0)
    # regressed through a final ReLU: how bright a garment is, from its pixels.
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        x, _, xt, _ = fashion_normalized()
        bright, bright_t = (x * STD + MEAN).mean(1, keepdim=True), (xt * STD + MEAN).mean(1, keepdim=True)
        mean, std = bright.mean(), bright.std()
        self.x, self.y, self.xt, self.yt = x, (bright - mean) / std, xt, (bright_t - mean) / std
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 1), nn.ReLU())
        self.opt = sgd(self.net, config)

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class BatchNormMomentumTfConvention(FashionCase):
    # pytorch/vision#8250 (https://github.com/pytorch/vision/issues/8250): "Current BatchNorm momentum
    # is set to 0.99 [...] taken from the original implementation. But due to the differences between
    # PyTorch and TensorFlow implementation of BatchNorm, the momentum should be 1-momentum" (also
    # kazuto1011/deeplab-pytorch#79, r9y9/tacotron_pytorch#19). A CNN whose BatchNorm layers keep
    # TensorFlow's 0.99.
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16, momentum=0.99), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32, momentum=0.99),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


class LossDividedByBatchTwice(FashionCase):
    # felipecode/coiltraine#37 (https://github.com/felipecode/coiltraine/issues/37): "the speed_loss is
    # being divided by params['branches'][0].shape[0] (the batch_size?) twice" ("Yes, I found this
    # recently. It was dividing twice"). A mean over the batch, divided by the batch size again.
    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets) / outputs.shape[0]


# ---------------------------------------------------------------- the fifth batch (added after the first twenty-two were fixed)

class LayersInPythonList(FashionCase):
    # pytorch/pytorch#59925 (https://github.com/pytorch/pytorch/issues/59925): "self.layers =
    # [torch.nn.Linear(4, 4) for i in range(2)] [...] optimizers may silently fail to update parameters
    # of those modules" (also ikostrikov/pytorch-meta-optimizer#11: "the current version will not train
    # the LSTM weights at all"). The hidden layers kept in a plain list.
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = [nn.Linear(784, 128), nn.Linear(128, 64)]  # a list: not registered
                self.out = nn.Linear(64, 10)

            def forward(self, x):
                for layer in self.layers:
                    x = F.relu(layer(x))
                return self.out(x)
        return Net()


class LinearCreatedInForward(FashionCase):
    # graykode/nlp-tutorial#29 (https://github.com/graykode/nlp-tutorial/issues/29): "If create the
    # Linear() casually, it won't be trained during training": the tutorial's attention ends in
    # `output = nn.Linear(n_heads * d_v, d_model)(context)` and `nn.LayerNorm(d_model)(output + residual)`,
    # built in forward().
    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(784, 128)
                self.out = nn.Linear(128, 10)

            def forward(self, x):
                residual = F.relu(self.fc1(x))
                output = nn.Linear(128, 128)(residual)
                return self.out(nn.LayerNorm(128)(output + residual))
        return Net()


class IgnoreIndexIsAClass(FashionCase):
    # nyu-mll/jiant#925 (https://github.com/nyu-mll/jiant/issues/925): "we put ignore_index as
    # pad_index. I've definitely had it happen where I have 0 as a target class for the tagger [...]
    # the cross_entropy ignores all 0 class in the target". The padding index, 0, is a class here.
    pad_index = 0

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets, ignore_index=self.pad_index)


class WarmupRestartsEachEpoch(FashionCase):
    # Vision-CAIR/MiniGPT-4#263 (https://github.com/Vision-CAIR/MiniGPT-4/pull/263): "LR resets every
    # epoch during warmup to warmup_start_lr because it uses inner epoch step counter". A linear
    # warm-up of 200 steps counted by the step within the epoch, epochs of 23 batches.
    train = 1500
    warmup = 200

    def __init__(self, config):
        super().__init__(config)
        self.base_lr = config.optimizer.lr

    def optimizer_step(self):
        cur_step = (self.done - 1) % self.batches_per_epoch()  # the inner epoch step counter
        for group in self.opt.param_groups:
            group["lr"] = self.base_lr * min(1.0, (cur_step + 1) / self.warmup)
        self.opt.step()


class AttentionSoftmaxOverQueries(TextCase):
    # karpathy/minGPT#132 (https://github.com/karpathy/minGPT/issues/132): "I accidentally changed the
    # softmax dimension to -2 instead of -1 and got incredibly low losses on both the training and
    # validation set. However, when generating from the model, I get very low-quality result" (also
    # karpathy/ng-video-lecture#42). The causal attention normalized over the queries.
    def __init__(self, config):
        super().__init__(config)

        class WrongDim(Attention):
            softmax_dim = -2  # "I accidentally changed the softmax dimension to -2 instead of -1"
        self.net = TinyGPT(WrongDim(32, self.block, 0.1))
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class EncoderUnderNoGrad(FashionCase):
    # rll-research/cic#5 (https://github.com/rll-research/cic/issues/5): "the observations are encoded
    # inside torch.no_grad which means that there is no gradient calculation for the CNN, which means
    # that the CNN weights will not be updated". A CNN encoder run under no_grad, its head trained,
    # one optimizer over both.
    flat = False

    def build(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                             nn.Flatten())
                self.head = nn.Sequential(nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))

            def forward(self, obs):
                with torch.no_grad():
                    h = self.encoder(obs)
                return self.head(h)
        return Net()


class ValidationInTrainingSet(FashionCase):
    # ratschlab/aestetik#12 (https://github.com/ratschlab/aestetik/pull/12): "setup() builds
    # self.train_dataset and self.val_dataset via random_split, but train_dataloader wraps self.dataset
    # (the full set), so validation samples leak into training". The training batches drawn from the
    # full set, the held-out split inside it.
    def __init__(self, config):
        super().__init__(config)
        self.x, self.y = torch.cat([self.x, self.xt]), torch.cat([self.y, self.yt])


class OptimizerSteppedTwice(FashionCase):
    # mzolfaghari/ECO-pytorch#1 (https://github.com/mzolfaghari/ECO-pytorch/pull/1): "This pull request
    # fixes duplicate optimizer step when using iter_size > 1. Original code performed step even
    # outside the iter_size 'if' clause". Adam with iter_size 2: a step every second batch inside the
    # clause, and one after it on every batch.
    iter_size = 2

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def optimizer_step(self):
        if self.done % self.iter_size == 0:
            self.opt.step()
        self.opt.step()  # outside the clause


# ---------------------------------------------------------------- healthy programs

class HealthyBnDropoutCnn(FashionCase):
    """An ordinary CNN: Conv, BatchNorm, ReLU, pooling, Dropout, a ReLU hidden layer, a plain head."""
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Dropout(0.3), nn.Linear(32 * 7 * 7, 64), nn.ReLU(),
                             nn.Dropout(0.3), nn.Linear(64, 10))


class HealthyLstm(LstmWithoutBatchFirst):
    """The row LSTM with batch_first=True."""
    def __init__(self, config):
        super().__init__(config)
        self.net = RowLstm(batch_first=True)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class PreNormBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class PreNormGpt(nn.Module):
    def __init__(self, d=32, block=32, vocab=256, layers=2, heads=4):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(PreNormBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


class HealthyPreNormTransformer(TextCase):
    """A pre-norm decoder (nn.MultiheadAttention with a causal mask), AdamW."""
    def __init__(self, config):
        super().__init__(config)
        self.net = PreNormGpt()
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02)


class HealthyZeroInitHead(FashionCase):
    """An MLP whose output layer starts at zero (a zero-initialized head, as LoRA's B factor)."""
    def build(self):
        net = MLP(hidden=128)
        nn.init.zeros_(net.fc2.weight)
        nn.init.zeros_(net.fc2.bias)
        return net


class HealthyAutoencoder(Case):
    """A denoising autoencoder: noisy standardized images in, the clean images as targets (MSE), Adam."""
    classes = 1

    def __init__(self, config):
        super().__init__(config)
        self.x, _, self.xt, _ = fashion_normalized()
        self.y, self.yt = self.x, self.xt
        self.net = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU(),
                                 nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 784))
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def next_batch(self):
        batch = super().next_batch()
        if batch is None:
            return None
        x, y = batch
        return x + 0.3 * torch.randn(x.shape, generator=self.generator), y

    def loss(self, outputs, targets):
        return F.mse_loss(outputs, targets)


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)
        nn.init.zeros_(self.bn2.weight)  # each block starts as the identity (Goyal et al.: zero-init the last BN)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class HealthyResnetZeroGamma(FashionCase):
    """A small ResNet whose blocks' last BatchNorm scale starts at zero."""
    flat = False

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                             BasicBlock(16), nn.MaxPool2d(2), BasicBlock(16), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16 * 7 * 7, 10))


class LoraLinear(nn.Module):
    """A frozen linear layer and a trained low-rank update B @ A, B starting at zero (LoRA)."""
    def __init__(self, base, rank=4):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad = False
        self.a = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + x @ self.a.t() @ self.b.t()


_PRETRAINED = {}


def pretrained_mlp(x, y):
    """The MLP trained for 300 SGD steps on (x, y), once per process, with its own seeds: the
    pretrained model a LoRA adapter starts from."""
    if "mlp" not in _PRETRAINED:
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            net = MLP(hidden=128)
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
            g = torch.Generator().manual_seed(1234)
            for _ in range(300):
                idx = torch.randint(0, x.shape[0], (64,), generator=g)
                opt.zero_grad()
                F.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
        _PRETRAINED["mlp"] = {k: v.detach().clone() for k, v in net.state_dict().items()}
    net = MLP(hidden=128)
    net.load_state_dict(_PRETRAINED["mlp"])
    return net


class HealthyLoraAdapter(FashionCase):
    """A pretrained MLP adapted with LoRA: its weights frozen, rank-4 factors (B zero at the start)
    trained with AdamW."""
    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.AdamW([p for p in self.net.parameters() if p.requires_grad], lr=config.optimizer.lr * 0.02)

    def build(self):
        base = pretrained_mlp(self.x, self.y)
        base.fc1, base.fc2 = LoraLinear(base.fc1), LoraLinear(base.fc2)
        return base


class HealthyVitWarmupCosine(FashionCase):
    """A small vision transformer (7x7 patches, two pre-norm encoder layers, mean pooling) under AdamW
    with a linear warm-up of 10 steps and a cosine decay."""
    flat = False

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=config.optimizer.lr * 0.02, weight_decay=0.05)
        total, warmup = self.planned_steps(), 10
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: (s + 1) / warmup if s < warmup else
            0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup))))

    def build(self):
        class Vit(nn.Module):
            def __init__(self, d=32):
                super().__init__()
                self.patch = nn.Conv2d(1, d, 7, stride=7)
                self.pos = nn.Parameter(torch.randn(1, 16, d) * 0.02)
                layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
                self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.norm = nn.LayerNorm(d)
                self.head = nn.Linear(d, 10)

            def forward(self, x):
                tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos
                return self.head(self.norm(self.encoder(tokens)).mean(1))
        return Vit()

    def optimizer_step(self):
        self.opt.step()
        self.schedule.step()


class HealthyLabelSmoothingCnn(FashionCase):
    """A CNN trained with label smoothing 0.1, Nesterov momentum and weight decay."""
    flat = False

    def __init__(self, config):
        super().__init__(config)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=config.optimizer.lr, momentum=0.9, nesterov=True,
                                   weight_decay=5e-4)

    def build(self):
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def loss(self, outputs, targets):
        return F.cross_entropy(outputs, targets, label_smoothing=0.1)


class HealthyGruClassifier(LstmWithoutBatchFirst):
    """A two-layer GRU over the image rows (batch_first), dropout between layers, Adam, the gradient
    norm clipped at 1."""
    def __init__(self, config):
        super().__init__(config)

        class RowGru(nn.Module):
            def __init__(self):
                super().__init__()
                self.gru = nn.GRU(28, 64, num_layers=2, dropout=0.2, batch_first=True)
                self.fc = nn.Linear(64, 10)

            def forward(self, x):
                out, _ = self.gru(x)
                return self.fc(out[:, -1, :])
        self.net = RowGru()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.optimizer.lr * 0.02)

    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.opt.step()


BUGS = {
    "loss_summed_over_batch": LossSummedOverBatch,
    "sigmoid_before_bce_with_logits": SigmoidBeforeBceWithLogits,
    "relu_before_cross_entropy": ReluBeforeCrossEntropy,
    "lstm_without_batch_first": LstmWithoutBatchFirst,
    "batches_sorted_by_class": BatchesSortedByClass,
    "constant_init": ConstantInit,
    "batchnorm_on_batches_of_one": BatchNormOnBatchesOfOne,
    "lm_labels_not_shifted": LmLabelsNotShifted,
    "causal_mask_missing": CausalMaskMissing,
    "dropout_keep_prob_as_p": DropoutKeepProbAsP,
    "pad_tokens_in_loss": PadTokensInLoss,
    "residual_stack_shared_by_list_multiplication": ResidualStackSharedByListMultiplication,
    "model_instantiated_twice": ModelInstantiatedTwice,
    "repeated_worker_batches": RepeatedWorkerBatches,
    "sigmoid_output_for_signed_targets": SigmoidOutputForSignedTargets,
    "frozen_by_name_filter": FrozenByNameFilter,
    "loss_rebuilt_from_item": LossRebuiltFromItem,
    "unnormalized_regression_targets": UnnormalizedRegressionTargets,
    "sigmoid_before_cross_entropy": SigmoidBeforeCrossEntropy,
    "relu_on_regression_output": ReluOnRegressionOutput,
    "batchnorm_momentum_tf_convention": BatchNormMomentumTfConvention,
    "loss_divided_by_batch_twice": LossDividedByBatchTwice,
    "layers_in_python_list": LayersInPythonList,
    "linear_created_in_forward": LinearCreatedInForward,
    "ignore_index_is_a_class": IgnoreIndexIsAClass,
    "warmup_restarts_each_epoch": WarmupRestartsEachEpoch,
    "attention_softmax_over_queries": AttentionSoftmaxOverQueries,
    "encoder_under_no_grad": EncoderUnderNoGrad,
    "validation_in_training_set": ValidationInTrainingSet,
    "optimizer_stepped_twice": OptimizerSteppedTwice,
}
HEALTHY = {
    "healthy_bn_dropout_cnn": HealthyBnDropoutCnn,
    "healthy_lstm": HealthyLstm,
    "healthy_pre_norm_transformer": HealthyPreNormTransformer,
    "healthy_zero_init_head": HealthyZeroInitHead,
    "healthy_autoencoder": HealthyAutoencoder,
    "healthy_resnet_zero_gamma": HealthyResnetZeroGamma,
    "healthy_lora_adapter": HealthyLoraAdapter,
    "healthy_vit_warmup_cosine": HealthyVitWarmupCosine,
    "healthy_label_smoothing_cnn": HealthyLabelSmoothingCnn,
    "healthy_gru_classifier": HealthyGruClassifier,
}
for _name, _cls in {**BUGS, **HEALTHY}.items():
    spikehunt.register(_name, _cls)

if __name__ == "__main__":
    spikehunt.main()
