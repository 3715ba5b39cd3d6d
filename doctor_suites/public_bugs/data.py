"""The data the cases train on: Fashion-MNIST from Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist) and English text from the fortunes package
(/usr/share/games/fortunes). Each case builds its own pipeline on top."""
import gzip
import os

import torch

FASHION = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"
_cache = {}


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def fashion_raw(split, n):
    """The first n images of a split as uint8 (n, 28, 28) and their labels (int64)."""
    key = ("fashion", split)
    if key not in _cache:
        prefix = "train" if split == "train" else "t10k"
        _cache[key] = (_idx(os.path.join(FASHION, f"{prefix}-images-idx3-ubyte.gz")),
                       _idx(os.path.join(FASHION, f"{prefix}-labels-idx1-ubyte.gz")).long())
    images, labels = _cache[key]
    return images[:n], labels[:n]


def text_bytes(limit=400_000):
    """The fortunes' English text as a uint8 tensor of bytes (files in name order)."""
    if "text" not in _cache:
        chunks = []
        for name in sorted(os.listdir(FORTUNES)):
            path = os.path.join(FORTUNES, name)
            if os.path.isfile(path) and "." not in name:
                with open(path, "rb") as f:
                    chunks.append(f.read())
        _cache["text"] = torch.frombuffer(bytearray(b"".join(chunks)[:limit]), dtype=torch.uint8).long()
    return _cache["text"]
