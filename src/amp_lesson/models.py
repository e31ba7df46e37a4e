"""The small seeded models the book trains and measures.

Every page that needs a network builds it here, so that two pages asking for
the same shape and seed get the same weights. Initialisation is PyTorch's
default, drawn from the CPU generator seeded with ``seed`` inside
:func:`torch.random.fork_rng`: the global random state a reader's own cells
use is left as it was.

>>> make_mlp(4, 8, 2, device="cpu")
Sequential(
  (0): Linear(in_features=4, out_features=8, bias=True)
  (1): ReLU()
  (2): Linear(in_features=8, out_features=8, bias=True)
  (3): ReLU()
  (4): Linear(in_features=8, out_features=1, bias=True)
)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from amp_lesson._checks import check_choice, check_dtype, check_int, check_seed
from amp_lesson.device import resolve_device

__all__ = [
    "Decoder",
    "ResNet",
    "make_decoder",
    "make_mlp",
    "make_resnet",
    "make_transformer_block",
    "seeded",
]

_NORMS = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm}
_PARAM_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed the CPU generator with ``seed`` inside the block, and restore it after.

    Only the CPU generator, which initialisation draws from: ``torch.manual_seed``
    would also reseed every GPU's, which :func:`torch.random.fork_rng` does not
    restore here.

    Parameters
    ----------
    seed : int
        The seed, in ``[0, 2**64 - 1]``: the seeds torch's generators take (they
        read a negative one as ``seed + 2**64``).

    Yields
    ------
    None
        Inside the block the CPU generator is seeded with ``seed``.

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    ValueError
        If ``seed`` is outside ``[0, 2**64 - 1]``.

    Examples
    --------
    Two draws under the same seed agree, and the draw after the block is the
    one that would have come without it:

    >>> before = torch.random.get_rng_state()
    >>> with seeded(3):
    ...     a = torch.rand(2)
    >>> with seeded(3):
    ...     b = torch.rand(2)
    >>> torch.equal(a, b), torch.equal(before, torch.random.get_rng_state())
    (True, True)
    """
    check_seed("seed", seed)
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


def make_mlp(
    in_features: int = 64,
    width: int | Sequence[int] = 256,
    depth: int | None = None,
    out_features: int = 1,
    *,
    norm: str | None = None,
    vocab: int | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> nn.Sequential:
    """A multilayer perceptron: hidden ``Linear + ReLU`` layers and a linear head.

    Parameters
    ----------
    in_features : int, default 64
        Features of an input row (or the embedding width, with ``vocab``).
    width : int or sequence of int, default 256
        Width of every hidden layer, or one width per hidden layer.
    depth : int, optional
        Number of hidden layers when ``width`` is an int (default 3); ``0``
        gives a single ``Linear(in_features, out_features)``. With a
        sequence of widths it is their count, and may be left out.
    out_features : int, default 1
        Width of the output.
    norm : {None, "batch", "layer"}, default None
        A ``BatchNorm1d`` or ``LayerNorm`` after each hidden ``Linear``,
        before its ReLU.
    vocab : int, optional
        With a vocabulary size the input is token ids: an
        ``Embedding(vocab, in_features)`` comes first.
    seed : int, default 0
        Seed of the initialisation (see :func:`seeded`).
    dtype : torch.dtype, default torch.float32
        Parameter dtype: float32, float64, float16 or bfloat16.
    device : torch.device or str, optional
        Where the model lives (:func:`amp_lesson.device.resolve_device`).

    Returns
    -------
    torch.nn.Sequential
        The layers in order, so ``model[0]`` is the first.

    Raises
    ------
    TypeError
        If a size is not an int or ``dtype`` is not a torch dtype.
    ValueError
        If a size is below 1 (``depth`` below 0), ``norm`` is unknown,
        ``depth`` disagrees with a sequence of widths, or ``seed`` is outside
        ``[0, 2**64 - 1]``.

    Examples
    --------
    The digits classifier of :mod:`amp_lesson.gradients`, 64 → 128 → 64 → 10:

    >>> mlp = make_mlp(64, (128, 64), out_features=10)
    >>> [m.out_features for m in mlp if isinstance(m, nn.Linear)]
    [128, 64, 10]

    A one-layer "language model" over a vocabulary of 16 tokens:

    >>> lm = make_mlp(8, depth=0, out_features=16, vocab=16)
    >>> lm(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 16])
    """
    check_int("in_features", in_features, minimum=1)
    check_int("out_features", out_features, minimum=1)
    if isinstance(width, int):
        check_int("width", width, minimum=1)
        depth = 3 if depth is None else check_int("depth", depth, minimum=0)
        widths = [width] * depth
    elif isinstance(width, Sequence) and not isinstance(width, str):
        widths = [check_int("width", w, minimum=1) for w in width]
        if depth is not None and depth != len(widths):
            raise ValueError(f"depth must be the number of widths ({len(widths)}), got {depth!r}")
    else:
        raise TypeError(f"width must be an int or a sequence of ints, got {width!r}")
    if norm is not None:
        check_choice("norm", norm, _NORMS)
    if vocab is not None:
        check_int("vocab", vocab, minimum=1)
    check_dtype("dtype", dtype, _PARAM_DTYPES)
    device = resolve_device(device)
    sizes = [in_features, *widths]
    with seeded(seed):
        layers: list[nn.Module] = [] if vocab is None else [nn.Embedding(vocab, in_features)]
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers.append(nn.Linear(fan_in, fan_out))
            if norm is not None:
                layers.append(_NORMS[norm](fan_out))
            layers.append(nn.ReLU())
        layers.append(nn.Linear(sizes[-1], out_features))
    return nn.Sequential(*layers).to(device=device, dtype=dtype)


def make_transformer_block(
    d_model: int = 128,
    n_heads: int = 4,
    ff: int = 512,
    *,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> nn.TransformerEncoderLayer:
    """One transformer encoder layer, ``batch_first``, without dropout.

    Dropout is off so that two runs of the same step compute the same thing,
    which a benchmark comparing precisions needs.

    Parameters
    ----------
    d_model : int, default 128
        Model width; a multiple of ``n_heads``.
    n_heads : int, default 4
        Attention heads.
    ff : int, default 512
        Width of the feed-forward layer.
    seed : int, default 0
        Seed of the initialisation (see :func:`seeded`).
    device : torch.device or str, optional
        Where the block lives.

    Returns
    -------
    torch.nn.TransformerEncoderLayer
        The block, taking inputs of shape ``(batch, seq_len, d_model)``.

    Raises
    ------
    ValueError
        If a size is below 1, ``d_model`` is not a multiple of ``n_heads``, or
        ``seed`` is outside ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> block = make_transformer_block(16, 2, 32, device="cpu")
    >>> (block.self_attn.embed_dim, block.linear1.out_features,
    ...  block.self_attn.batch_first)
    (16, 32, True)
    """
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("ff", ff)):
        check_int(name, value, minimum=1)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    device = resolve_device(device)
    with seeded(seed):
        block = nn.TransformerEncoderLayer(
            d_model, n_heads, dim_feedforward=ff, dropout=0.0, batch_first=True
        )
    return block.to(device)


# --------------------------------------------------------------------------- two networks of the
# kinds people train: a residual CNN with BatchNorm, and a decoder-only transformer on token ids


class _BasicBlock(nn.Module):
    """Two 3×3 convolutions with BatchNorm and a shortcut, as ResNet-18's blocks."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's output: both convolutions, plus the shortcut, through a ReLU."""
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """A residual network for small images: ResNet-18's blocks, fewer and narrower.

    Built by :func:`make_resnet`, which checks the arguments and seeds the weights.

    Parameters
    ----------
    widths : sequence of int
        Channels of each stage; every stage after the first halves the image.
    blocks : int
        Basic blocks per stage.
    classes : int
        Outputs.
    """

    def __init__(self, widths: Sequence[int], blocks: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        stages, c_in = [], widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks):
                stages.append(_BasicBlock(c_in, width, 2 if i and not j else 1))
                c_in = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits of a batch of images.

        Parameters
        ----------
        x : torch.Tensor
            Images, ``(batch, 3, height, width)``.

        Returns
        -------
        torch.Tensor
            Logits, ``(batch, classes)``.
        """
        features = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(features, 1), 1))


def make_resnet(
    widths: Sequence[int] = (16, 32, 64),
    blocks: int = 2,
    classes: int = 10,
    *,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> ResNet:
    """A small residual CNN with BatchNorm (ResNet-18's basic blocks, CIFAR-sized).

    Parameters
    ----------
    widths : sequence of int, default (16, 32, 64)
        Channels of each stage; every stage after the first halves the image.
    blocks : int, default 2
        Basic blocks per stage (ResNet-18 has 2, in four stages of 64 to 512).
    classes : int, default 10
        Outputs.
    seed : int, default 0
        Seed of the initialisation (see :func:`seeded`).
    device : torch.device or str, optional
        Where the network lives.

    Returns
    -------
    ResNet
        The network, in training mode.

    Raises
    ------
    ValueError
        If ``widths`` is empty, a size is below 1, or ``seed`` is outside
        ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> net = make_resnet(device="cpu")
    >>> net(torch.randn(2, 3, 32, 32)).shape, sum(p.numel() for p in net.parameters())
    (torch.Size([2, 10]), 175258)
    """
    widths = tuple(widths)
    if not widths:
        raise ValueError("widths must name at least one stage, got ()")
    for width in widths:
        check_int("widths", width, minimum=1)
    check_int("blocks", blocks, minimum=1)
    check_int("classes", classes, minimum=1)
    device = resolve_device(device)
    with seeded(seed):
        net = ResNet(widths, blocks, classes)
    return net.to(device)


class Decoder(nn.Module):
    """A decoder-only transformer on token ids, as GPT-2 arranges it (pre-norm, causal).

    Built by :func:`make_decoder`, which checks the arguments and seeds the weights.

    Parameters
    ----------
    vocab : int
        Tokens.
    d_model : int
        Width.
    n_heads : int
        Attention heads.
    n_layers : int
        Transformer layers.
    context : int
        The longest sequence.
    dropout : float
        Dropout after the embeddings and inside each layer.
    """

    def __init__(
        self, vocab: int, d_model: int, n_heads: int, n_layers: int, context: int, dropout: float
    ) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, 4 * d_model, dropout, activation="gelu", batch_first=True,
            norm_first=True,
        )  # fmt: skip
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits of a batch of token sequences.

        Parameters
        ----------
        ids : torch.Tensor
            Token ids, ``(batch, seq_len)``, ``seq_len`` at most ``context``.

        Returns
        -------
        torch.Tensor
            Logits, ``(batch, seq_len, vocab)``.
        """
        n = ids.shape[1]
        positions = torch.arange(n, device=ids.device)
        h = self.drop(self.tokens(ids) + self.positions(positions))
        causal = nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        return self.head(self.norm(self.blocks(h, mask=causal, is_causal=True)))


def make_decoder(
    vocab: int = 256,
    d_model: int = 128,
    n_heads: int = 4,
    n_layers: int = 2,
    *,
    context: int = 64,
    dropout: float = 0.1,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> Decoder:
    """A small decoder-only transformer on token ids, with dropout.

    Parameters
    ----------
    vocab : int, default 256
        Tokens (256: one per byte).
    d_model : int, default 128
        Width; a multiple of ``n_heads``.
    n_heads : int, default 4
        Attention heads.
    n_layers : int, default 2
        Pre-norm transformer layers, each with a feed-forward of ``4 * d_model``.
    context : int, default 64
        The longest sequence (learned positions).
    dropout : float, default 0.1
        Dropout after the embeddings and inside each layer.
    seed : int, default 0
        Seed of the initialisation (see :func:`seeded`).
    device : torch.device or str, optional
        Where the network lives.

    Returns
    -------
    Decoder
        The network, in training mode.

    Raises
    ------
    ValueError
        If a size is below 1, ``d_model`` is not a multiple of ``n_heads``,
        ``dropout`` is outside ``[0, 1)``, or ``seed`` is outside ``[0, 2**64 - 1]``.

    Examples
    --------
    >>> net = make_decoder(device="cpu")
    >>> ids = torch.randint(0, 256, (2, 16))
    >>> net(ids).shape, sum(p.numel() for p in net.parameters())
    (torch.Size([2, 16, 256]), 470528)
    """
    for name, value in (
        ("vocab", vocab), ("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers),
        ("context", context),
    ):  # fmt: skip
        check_int(name, value, minimum=1)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
    device = resolve_device(device)
    with seeded(seed):
        net = Decoder(vocab, d_model, n_heads, n_layers, context, float(dropout))
    return net.to(device)
