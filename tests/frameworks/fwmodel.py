"""fwmodel.py — the training state the framework tests checkpoint, and the
exact comparison they judge it by.

TinyGPT is a GPT-shaped torch.nn model (token and position embeddings, pre-LN
transformer blocks of nn.Linear/nn.LayerNorm with causal self-attention, a
final LayerNorm, an LM head tied to the token embedding) of about 3.7 M
parameters, so its state_dict (~15 MB) and Adam's (~30 MB) span many 4 MiB
cache chunks.  trained_state() builds it, takes a few Adam steps on random
tokens (two parameter groups, like the usual no-decay split) and returns
deep copies of both state_dicts: the in-memory truth a load must reproduce.

assert_same(actual, expected) walks nested dicts/lists/tuples and compares
every tensor with torch.equal after checking dtype and shape, and every
other leaf with ==.  It names the first difference by its path in the
structure (e.g. state[3].exp_avg[17, 4]), so a failure says what was torn.
Everything is deterministic for a given seed on CPU.
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 2048
CTX = 64
DIM = 256
HEADS = 4
LAYERS = 4


class Block(nn.Module):
    def __init__(self, dim, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        # A persistent buffer, as older GPT code keeps its causal mask.
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def attend(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab=VOCAB, ctx=CTX, dim=DIM, heads=HEADS, layers=LAYERS):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ctx) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def make_optimizer(model, lr=1e-3):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.Adam([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr)


def train(model, opt, steps, seed):
    """Adam steps on random tokens (next-token loss); deterministic per seed."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, model.tok.num_embeddings, (4, 33), generator=gen)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def trained_model(seed=0, steps=3):
    torch.manual_seed(seed)
    model = TinyGPT()
    opt = make_optimizer(model)
    train(model, opt, steps, seed)
    return model, opt


def trained_state(seed=0, steps=3):
    """(model state_dict, optimizer state_dict), deep copies after training."""
    model, opt = trained_model(seed, steps)
    return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())


def tensor_bytes(obj, seen=None):
    """Bytes of the distinct tensors in a nested structure (a tied weight,
    stored once by torch.save, counts once)."""
    seen = set() if seen is None else seen
    if torch.is_tensor(obj):
        key = (obj.data_ptr(), obj.numel(), obj.dtype)
        if key in seen:
            return 0
        seen.add(key)
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    return 0


def _first_difference(a, b):
    diff = (a != b).nonzero()
    if diff.numel() == 0:
        return "no element differs (NaN?)"
    where = tuple(diff[0].tolist())
    return "first at %s: %r vs %r" % (list(where), a[where].item(), b[where].item())


def assert_same(actual, expected, where="state"):
    if torch.is_tensor(expected):
        assert torch.is_tensor(actual), "%s: expected a tensor, got %s" % (where, type(actual).__name__)
        assert actual.dtype == expected.dtype, "%s: dtype %s vs %s" % (where, actual.dtype, expected.dtype)
        assert actual.shape == expected.shape, "%s: shape %s vs %s" % (
            where, tuple(actual.shape), tuple(expected.shape))
        assert torch.equal(actual, expected), "%s: values differ, %s" % (
            where, _first_difference(actual, expected))
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: expected a dict, got %s" % (where, type(actual).__name__)
        assert list(actual.keys()) == list(expected.keys()), "%s: keys %s vs %s" % (
            where, list(actual.keys()), list(expected.keys()))
        for k in expected:
            assert_same(actual[k], expected[k], "%s[%r]" % (where, k) if not isinstance(k, str)
                        else "%s.%s" % (where, k))
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), "%s: %s vs %s" % (
            where, type(actual).__name__, type(expected).__name__)
        assert len(actual) == len(expected), "%s: length %d vs %d" % (where, len(actual), len(expected))
        for i, (x, y) in enumerate(zip(actual, expected)):
            assert_same(x, y, "%s[%d]" % (where, i))
    else:
        assert actual == expected, "%s: %r vs %r" % (where, actual, expected)
