"""The op arguments shared by ``gpumodel roofline`` and ``gpumodel estimate``: ``OP SIZES...`` and options."""

from __future__ import annotations

import argparse

__all__ = ["add_op_arguments", "build_op", "number", "op_usage", "selected_gpus"]


def number(text: str) -> float:
    """A size on the command line: ``4096``, ``1e6`` or ``16_777_216``; whole numbers stay ints."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return int(value) if value.is_integer() else value


def op_usage() -> str:
    """``"matmul M N K; bmm BATCH M N K; ..."``: every op and its sizes, for a parser's description."""
    from gpumodel.ops import list_ops, size_arguments

    return "; ".join(f"{name} {' '.join(size_arguments(name)).upper()}" for name in list_ops())


def add_op_arguments(p: argparse.ArgumentParser, default_gpu: str, impl: bool = True) -> None:
    """Add ``op``, ``sizes``, ``--gpu``, ``--dtype`` and the attention and elementwise options."""
    from gpumodel.ops import list_ops

    p.add_argument("op", help="op name: " + ", ".join(list_ops()))
    p.add_argument("sizes", nargs="*", type=number, help="the op's sizes, in order (see above)")
    p.add_argument("--gpu", default=default_gpu, help=f"GPU name(s), comma-separated (default: {default_gpu})")
    p.add_argument("--dtype", default="bf16", help="number format (default: bf16)")
    attn = p.add_argument_group("attention")
    attn.add_argument("--causal", action="store_true")
    if impl:
        attn.add_argument("--impl", default="flash", choices=["flash", "naive"])
    attn.add_argument("--backward", action="store_true")
    attn.add_argument("--kv-heads", type=number, default=None, help="key/value heads (grouped-query attention)")
    ew = p.add_argument_group("elementwise")
    ew.add_argument("--inputs", type=number, default=1)
    ew.add_argument("--outputs", type=number, default=1)
    ew.add_argument("--flops-per-element", type=number, default=1)


def build_op(args: argparse.Namespace):
    """The :class:`~gpumodel.ops.OpCost` the parsed arguments describe."""
    from gpumodel.ops import cost, size_arguments

    names = size_arguments(args.op)
    if len(args.sizes) != len(names):
        raise ValueError(f"{args.op} takes {len(names)} sizes ({' '.join(names)}), got {len(args.sizes)}")
    kwargs = {"dtype": args.dtype}
    op_name = args.op.strip().lower().replace("-", "_")
    if op_name == "attention":
        kwargs.update(causal=args.causal, backward=args.backward, kv_heads=args.kv_heads,
                      impl=getattr(args, "impl", "flash"))
    elif op_name == "elementwise":
        kwargs.update(inputs=args.inputs, outputs=args.outputs, flops_per_element=args.flops_per_element)
    return cost(args.op, *args.sizes, **kwargs)


def selected_gpus(args: argparse.Namespace) -> list:
    """The GPU records named by ``--gpu`` (comma-separated)."""
    from gpumodel.gpus import gpu

    gpus = [gpu(name.strip()) for name in args.gpu.split(",") if name.strip()]
    if not gpus:
        raise ValueError("--gpu must name at least one GPU")
    return gpus
