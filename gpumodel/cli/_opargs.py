"""The op arguments shared by ``gpumodel roofline`` and ``gpumodel estimate``: ``OP SIZES...`` and options.

:func:`count_type`, the type of every count option of the commands, lives in :mod:`gpumodel.cli._common`
(imported here too, where it used to be defined)."""

from __future__ import annotations

import argparse

from ._common import count_type, parse_count, parse_number, refuse
from ..core.ops import AttentionImpl, cost, list_ops, size_arguments
from ..base.errors import ArgumentError
from ..vocabulary.gpus import gpu

__all__ = ["add_op_arguments", "build_op", "count_type", "op_usage", "selected_gpus", "SIZES_HELP"]

#: how the sizes are read, for the commands' epilogs
SIZES_HELP = ("Sizes are whole numbers >= 1: 4096, 1e6, 16_777_216, 8Ki (8192) or 4k (4000). Attention options\n"
              "(--causal, --backward, --kv-heads, --impl) apply to attention only, elementwise options\n"
              "(--inputs, --outputs, --flops-per-element) to elementwise only; elsewhere they are refused.\n")

_ATTENTION = {"causal": False, "backward": False, "kv_heads": None, "impl": "flash"}
_ELEMENTWISE = {"inputs": 1, "outputs": 1, "flops_per_element": 1.0}


def op_usage() -> str:
    """``"matmul M N K; bmm BATCH M N K; ..."``: every op and its sizes, for a parser's description."""
    return "; ".join(f"{name} {' '.join(size_arguments(name)).upper()}" for name in list_ops())


def add_op_arguments(p: argparse.ArgumentParser, default_gpu: str, impl: bool = True) -> None:
    """Add ``op``, ``sizes``, ``--gpu``, ``--dtype`` and the attention and elementwise options."""
    p.add_argument("op", help="op name: " + ", ".join(list_ops()))
    p.add_argument("sizes", nargs="*", help="the op's sizes, in order (see above)")
    p.add_argument("--gpu", default=default_gpu, help=f"GPU name(s), comma-separated (default: {default_gpu})")
    p.add_argument("--dtype", default="bf16", help="number format (default: bf16)")
    attn = p.add_argument_group("attention")
    attn.add_argument("--causal", action="store_true", help="causal mask (half the score matrix)")
    if impl:
        kinds = [k.value for k in AttentionImpl]  # every impl gm.ops.attention takes
        attn.add_argument("--impl", choices=kinds, help=f"kernel kind: {', '.join(kinds)} (default: flash)")
    attn.add_argument("--backward", action="store_true", help="the backward pass instead of the forward")
    attn.add_argument("--kv-heads", type=count_type(1), help="key/value heads (grouped-query attention)")
    ew = p.add_argument_group("elementwise")
    ew.add_argument("--inputs", type=count_type(0), help="input tensors (default 1)")
    ew.add_argument("--outputs", type=count_type(1), help="output tensors (default 1)")
    ew.add_argument("--flops-per-element", type=lambda t: parse_number(t), metavar="N",
                    help="FLOPs per output element (default 1)")


def _given(args: argparse.Namespace, defaults: dict) -> list[str]:
    return ["--" + k.replace("_", "-") for k in defaults if getattr(args, k, None) not in (None, False)]


def build_op(args: argparse.Namespace):
    """The :class:`~gpumodel.core.ops.OpCost` the parsed arguments describe."""
    names = size_arguments(args.op)
    if len(args.sizes) != len(names):
        raise ArgumentError(f"{args.op} takes {len(names)} sizes ({' '.join(names)}), got {len(args.sizes)}")
    sizes = [parse_count(text, name, minimum=1) for text, name in zip(args.sizes, names)]
    op_name = args.op.strip().lower().replace("-", "_")
    if op_name != "attention":
        refuse(_given(args, _ATTENTION), f"applies to attention only, not to {args.op}")
    if op_name != "elementwise":
        refuse(_given(args, _ELEMENTWISE), f"applies to elementwise only, not to {args.op}")
    kwargs = {"dtype": args.dtype}
    if op_name == "attention":
        kwargs.update(causal=args.causal, backward=args.backward, kv_heads=args.kv_heads,
                      impl=getattr(args, "impl", None) or "flash")
    elif op_name == "elementwise":
        kwargs.update({k: default if getattr(args, k) is None else getattr(args, k)
                       for k, default in _ELEMENTWISE.items()})
    return cost(args.op, *sizes, **kwargs)


def selected_gpus(args: argparse.Namespace) -> list:
    """The GPU records named by ``--gpu`` (comma-separated)."""
    names = [name.strip() for name in args.gpu.split(",")]
    if not all(names):
        raise ArgumentError(f"--gpu {args.gpu!r}: give a GPU name, or several separated by commas (h100,h200)")
    return [gpu(name) for name in names]
