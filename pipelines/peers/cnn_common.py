"""What the PyTorch peers share with forestall's CNN: the data, its split, the
class weights, the net and the loss.

The data part needs only the standard library (so `--dry-run` runs without
torch or NumPy); `make_net` and `evaluate` import torch when called.
"""

import ast
import json
import struct
import sys
import zipfile

# forestall's net (src/workload/cnn/net.rs, CnnConfig::pneumonia)
SIDE = 28
KERNEL = 5
FILTERS = (32, 64, 128)
POOL_AFTER = (True, True, False)
LSTM_HIDDEN = 64

# what `numpy.save` writes for the arrays MedMNIST uses
_DTYPES = {"|u1": ("B", 1), "<u2": ("<H", 2), "<i4": ("<i", 4), "<i8": ("<q", 8),
           "<f4": ("<f", 4), "<f8": ("<d", 8)}


class PeerError(Exception):
    """Bad input: the message names the culprit."""


def read_npy(raw, name):
    """(shape, values as a list, raw bytes of the data, descr) of a version-1/2/3 .npy."""
    if raw[:6] != b"\x93NUMPY":
        raise PeerError(f"{name} is not a .npy array")
    major = raw[6]
    if major == 1:
        (header_len,) = struct.unpack("<H", raw[8:10])
        start = 10
    else:
        (header_len,) = struct.unpack("<I", raw[8:12])
        start = 12
    header = ast.literal_eval(raw[start:start + header_len].decode("latin1"))
    if header.get("fortran_order"):
        raise PeerError(f"{name} is in Fortran order")
    descr = header["descr"]
    if descr not in _DTYPES:
        raise PeerError(f"{name} has dtype {descr}; the peers read {', '.join(_DTYPES)}")
    shape = tuple(header["shape"])
    data = raw[start + header_len:]
    fmt, size = _DTYPES[descr]
    count = 1
    for d in shape:
        count *= d
    if len(data) != count * size:
        raise PeerError(f"{name} holds {len(data)} bytes for shape {shape} of {descr}")
    return shape, descr, data


def _values(descr, data):
    fmt, size = _DTYPES[descr]
    if descr == "|u1":
        return list(data)
    return [v[0] for v in struct.iter_unpack(fmt, data)]


def load_split(path, split):
    """(pixels scaled to [0, 1] as bytes-or-floats, labels 0/1, image count) of
    `split` ("train" or "test") of a MedMNIST .npz, checked as forestall checks it
    (src/data/images.rs: images [n, 28, 28], one label in {0, 1} per image)."""
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise PeerError(f"--data {path}: cannot read: {e}") from e
    with archive:
        arrays = {}
        for name in (f"{split}_images", f"{split}_labels"):
            try:
                raw = archive.read(f"{name}.npy")
            except KeyError as e:
                raise PeerError(f"--data {path}: no array {name}") from e
            arrays[name] = read_npy(raw, f"{path}:{name}")
    shape, descr, data = arrays[f"{split}_images"]
    if len(shape) != 3 or shape[1:] != (SIDE, SIDE):
        raise PeerError(f"--data {path}: {split}_images has shape {shape}; the net expects [n, {SIDE}, {SIDE}]")
    n = shape[0]
    lshape, ldescr, ldata = arrays[f"{split}_labels"]
    labels = _values(ldescr, ldata)
    if lshape[:1] != (n,) or len(labels) != n:
        raise PeerError(f"--data {path}: {split}_labels has shape {lshape}; expected [{n}] or [{n}, 1]")
    if any(y not in (0, 1) for y in labels):
        raise PeerError(f"--data {path}: {split}_labels holds a label outside {{0, 1}}")
    return {"shape": shape, "descr": descr, "data": data, "labels": [int(y) for y in labels], "n": n}


def class_weights(train_labels, weighting):
    """forestall's class weights (src/workload/cnn/classifier.rs): "balanced" gives a
    class of n_c of the N training images the weight N / (2 n_c); "none" weighs 1."""
    if weighting == "none":
        return [1.0, 1.0]
    n = len(train_labels)
    positives = sum(train_labels)
    # f32, as forestall computes them
    return [struct.unpack("<f", struct.pack("<f", n / (2.0 * max(c, 1))))[0]
            for c in (n - positives, positives)]


def emit(event, **fields):
    """One JSON line on stdout."""
    print(json.dumps({"event": event, **fields}), flush=True)


def fail(message):
    """Bad input: the message on stderr, exit 2 (as forestall's CLI)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def first_reached(evals, target):
    """Index of the first of two consecutive evaluations at or above `target`
    (None if none)."""
    for i in range(len(evals) - 1):
        if evals[i] >= target and evals[i + 1] >= target:
            return i
    return None


def images_tensor(torch, split):
    """[n, 1, 28, 28] float32 in [0, 1] and [n] float32 labels."""
    n = split["n"]
    if split["descr"] == "|u1":
        x = torch.frombuffer(bytearray(split["data"]), dtype=torch.uint8).to(torch.float32) / 255.0
    else:
        x = torch.tensor(_values(split["descr"], split["data"]), dtype=torch.float32)
    x = x.reshape(n, 1, SIDE, SIDE)
    y = torch.tensor(split["labels"], dtype=torch.float32)
    return x, y


def make_net(torch):
    """forestall's CNN in PyTorch: three 5 × 5 'same' convolutions of 32, 64, 128
    filters with ReLU, 2 × 2 max-pooling after the first two, the 7 × 7 × 128 map read
    as 49 steps (row-major: step = row · 7 + column) of 128 features by an LSTM of 64,
    a dense output (logit of P(class 1)). PyTorch's default initialisation draws every
    weight and bias uniform in ±1/√fan_in (±1/√hidden for the LSTM), as forestall's."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            c_in = 1
            self.convs = nn.ModuleList()
            for f in FILTERS:
                self.convs.append(nn.Conv2d(c_in, f, KERNEL, padding="same"))
                c_in = f
            self.pool = nn.MaxPool2d(2, 2)
            self.lstm = nn.LSTM(FILTERS[-1], LSTM_HIDDEN, batch_first=True)
            self.head = nn.Linear(LSTM_HIDDEN, 1)

        def forward(self, x):
            for conv, pool in zip(self.convs, POOL_AFTER):
                x = torch.relu(conv(x))
                if pool:
                    x = self.pool(x)
            b, c, h, w = x.shape
            seq = x.reshape(b, c, h * w).transpose(1, 2)  # [b, 49, 128]
            _, (hidden, _) = self.lstm(seq)
            return self.head(hidden[-1])  # [b, 1]

    return Net()


def adam(torch, net, lr, l2):
    """Adam (β 0.9 / 0.999, ε 1e-8) with forestall's L2 penalty l2/2 · ‖w‖² on the
    weights, not the biases."""
    weights = [p for n, p in net.named_parameters() if not n.endswith("bias")]
    biases = [p for n, p in net.named_parameters() if n.endswith("bias")]
    return torch.optim.Adam(
        [{"params": weights, "weight_decay": l2}, {"params": biases, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.999), eps=1e-8)


def weighted_bce(torch, logits, y, w):
    """Mean over the batch of w_i · BCE(σ(z_i), y_i): forestall's Σ loss / images."""
    return torch.nn.functional.binary_cross_entropy_with_logits(
        logits.squeeze(1), y, weight=w, reduction="mean")


def evaluate(torch, net, x, y, batch=256):
    """Test accuracy (at 0.5) and log-loss of the whole test set."""
    net.eval()
    right = 0
    loss = 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            z = net(x[i:i + batch]).squeeze(1)
            t = y[i:i + batch]
            right += int(((z >= 0).float() == t).sum())
            p = torch.sigmoid(z).clamp(1e-7, 1 - 1e-7)
            loss += float(-(t * p.log() + (1 - t) * (1 - p).log()).sum())
    net.train()
    n = x.shape[0]
    return right / n, loss / n
