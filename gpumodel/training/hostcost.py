"""The host side of an eager PyTorch training step: per-op CPU costs and a host/device timeline.

Eager PyTorch runs every op on the CPU first (the Python call, the ATen dispatcher, autograd's
bookkeeping, the launch) and only then on the GPU. Kernels queue up, so the GPU runs ahead of
nothing and waits whenever its kernels are shorter than their dispatch. With ``h_i`` the time the
host has finished launching kernel ``i`` (cumulative host cost) and ``d_i`` the kernel's time, the
device finishes kernel ``n`` at

.. math::  e_n = \\max(e_{n-1}, h_n) + d_n = D_n + \\max_{j \\le n} (h_j - D_{j-1}),

with ``D`` the cumulative device time; a synchronisation (``loss.item()``, a data-dependent
``nonzero``) makes the host wait for ``e`` and pay a round trip. :func:`timeline` evaluates this
over a whole step in a few numpy calls.

The per-op costs are properties of the host (CPU, Python, torch and transformers versions), not of
the GPU: :class:`HostCosts` holds them, measured on the machine by ``bench/measure_step_time.py`` or
:func:`gpumodel.training.hostfit.measure_host` and shipped for the H200 machine in
``specs/hosts/h200-sxm.yaml``. Without such a file, :data:`DEFAULT_HOST` is used and the
step time is labelled uncalibrated.

References
----------
H. He, "Making Deep Learning Go Brrrr From First Principles", 2022 (overhead-bound eager PyTorch:
a few microseconds per op). PyTorch ``torch/optim/adamw.py`` (``_multi_tensor_adamw``,
``_fused_adamw``), ``torch/nn/utils/clip_grad.py``.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import yaml

from ..base.errors import ArgumentError, SpecError
from ..records.specs import shipped_root
from ..vocabulary import path_argument

__all__ = ["HostCosts", "DEFAULT_HOST", "host_costs_for", "load_host_costs", "timeline", "Timeline"]



@dataclass(frozen=True)
class HostCosts:
    """Per-op CPU costs of eager PyTorch on one host [s].

    Attributes
    ----------
    op_s : float
        One forward op under autograd recording (Python call, dispatch, graph node, launch).
    op_nograd_s : float
        One op without autograd (optimizer for-loops, ``no_grad`` routing).
    view_s : float
        A view / reshape / transpose (no kernel), and Python glue per op of the model code.
    module_s : float
        ``nn.Module.__call__`` overhead per module call.
    autocast_s : float
        Extra dispatch per op under ``torch.autocast``.
    backward_op_s : float
        One backward node run by the autograd engine (per backward kernel).
    checkpoint_forward_s, checkpoint_backward_s : float
        Extra host time per op under non-reentrant activation checkpointing (the saved-tensor hooks):
        per forward (and recomputed) op, and per backward op.
    launch_s : float
        Launch of one kernel of a compiled (torch.compile) graph.
    item_s : float
        A synchronisation round trip on an idle GPU (``.item()``).
    nonzero_s : float
        ``torch.nonzero`` on an idle GPU, its synchronisation included (counts, then the output's allocation).
    kernel_floor_s : float
        The device's minimum time per kernel launched back to back (launch gap included).
    compile_launch_s : float
        Launch of one kernel of a ``torch.compile``d graph from inductor's generated Python wrapper
        (0: ``launch_s``).
    compile_forward_s, compile_backward_s : float
        Host time per call of a compiled forward and of its compiled backward beyond the launches
        (guards, runtime wrappers, the autograd function).
    expert_forward_s, expert_backward_s : float
        Host time of one iteration of Hugging Face's eager expert loop (``experts_implementation="eager"``),
        forward and backward, its two synchronisations on an idle GPU included (0: priced per op).
    gemm_shape_s, gemm_shape_k_s : float
        Extra host time of a matmul whose shape the GEMM library has not seen before (cuBLAS chooses its
        kernel on the host, per shape, and caches the choice): a new number of rows (a forward or
        input-gradient product), a new contraction length (a weight gradient). The eager expert loop's
        GEMMs see a new token count per expert each step (0: not measured).
    optimizer : dict
        ``"<optimizer>_<impl>"`` -> (seconds per step, seconds per parameter tensor) of ``opt.step()``,
        impl in {"foreach", "fused", "forloop"}.
    clip_s, clip_tensor_s : float
        ``clip_grad_norm_``: per call and per parameter tensor.
    zero_grad_tensor_s : float
        ``zero_grad(set_to_none=True)`` per parameter tensor.
    layers : dict
        Optional, per Hugging Face ``model_type`` or ``"*"`` for all of them (key ``"<model_type>"`` without
        autocast, ``"<model_type>/amp"`` under it, ``.../ckpt`` with activation checkpointing):
        ``{"forward": x, "backward": x, "fixed_forward": x, "fixed_backward": x}``, the ratio of the host
        time measured on tiny models to the per-op sum (per decoder layer, and outside the layers), which
        the Python glue of the modeling code sets. A family's own entry comes first, then ``"*"``; 1 where
        absent. Half-precision models (bf16, fp16: their casts are real kernels, as under autocast) use
        the autocast entry.
    calibrated : bool
        Whether these were measured on the host (else defaults).
    source : str
        Where the numbers come from.
    """

    op_s: float = 13e-6
    op_nograd_s: float = 9e-6
    view_s: float = 4e-6
    module_s: float = 1.5e-6
    autocast_s: float = 0.0
    backward_op_s: float = 22e-6
    checkpoint_forward_s: float = 12e-6
    checkpoint_backward_s: float = 0.0
    launch_s: float = 7.5e-6
    item_s: float = 1.1e-5
    nonzero_s: float = 4e-5
    kernel_floor_s: float = 1e-6
    compile_launch_s: float = 0.0
    compile_forward_s: float = 0.0
    compile_backward_s: float = 0.0
    expert_forward_s: float = 0.0
    expert_backward_s: float = 0.0
    gemm_shape_s: float = 0.0
    gemm_shape_k_s: float = 0.0
    optimizer: dict = field(default_factory=lambda: {
        "adamw_foreach": (2.3e-4, 8e-6), "adamw_fused": (8e-5, 2.5e-6), "adamw_forloop": (3.8e-4, 7e-5),
        "sgd_foreach": (4.5e-5, 0.9e-6), "sgd_fused": (1e-4, 1.5e-6), "sgd_forloop": (1.2e-4, 6.7e-6)})
    clip_s: float = 2.2e-4
    clip_tensor_s: float = 2.6e-6
    zero_grad_tensor_s: float = 0.1e-6
    layers: dict = field(default_factory=lambda: {"*": {"forward": 3.0, "backward": 1.4, "fixed_forward": 3.0,
                                                        "fixed_backward": 1.4}})
    calibrated: bool = False
    source: str = ("defaults: the H200 machine's host (16-core Xeon, Python 3.12, torch 2.11, transformers 5.17, "
                   "2026-12-03) rounded; one host, not this one")

    def compiled_launch(self) -> float:
        """Host seconds per kernel of a compiled graph."""
        return self.compile_launch_s or self.launch_s

    def optimizer_cost(self, optimizer: str, impl: str, tensors: int) -> float:
        """Host seconds of one ``opt.step()`` over ``tensors`` parameter tensors."""
        key = f"{'adamw' if optimizer in ('adamw', 'adam') else 'sgd'}_{impl}"
        base, per = self.optimizer.get(key, self.optimizer["adamw_foreach"])
        return base + per * tensors

    def layer_scale(self, family: str, amp: bool, checkpointing: bool = False) -> dict:
        """Ratios of measured to per-op host time for a family's layers (1 where not measured)."""
        keys: tuple = ()
        for fam in (family, "*"):
            base = (f"{fam}/amp", fam) if amp else (fam, f"{fam}/amp")
            keys += (tuple(k + "/ckpt" for k in base) if checkpointing else ()) + base
        for key in keys:
            if key in self.layers:
                out = {"forward": 1.0, "backward": 1.0, "fixed_forward": 1.0, "fixed_backward": 1.0, **self.layers[key]}
                # measured with checkpointing, the backward's ratio covers its recomputed forward too
                out.setdefault("recompute", out["backward"] if key.endswith("/ckpt") else out["forward"])
                return out
        return {"forward": 1.0, "backward": 1.0, "fixed_forward": 1.0, "fixed_backward": 1.0, "recompute": 1.0}

    def to_dict(self) -> dict:
        out = asdict(self)
        out["optimizer"] = {k: list(v) for k, v in self.optimizer.items()}
        return out


#: Host costs used where no measured file exists (labelled uncalibrated).
DEFAULT_HOST = HostCosts()


def load_host_costs(path: str | os.PathLike) -> HostCosts:
    """Read a host-cost YAML file (``host:`` mapping of :class:`HostCosts` fields)."""
    path = path_argument(path, "host").expanduser()
    if not path.is_file():
        raise SpecError(f"{path}: no such host-cost file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: cannot read a host-cost YAML file ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of host-cost fields, got a {type(data).__name__}")
    data = data.get("host", data)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: host: expected a mapping of host-cost fields, got a {type(data).__name__}")
    known = {f.name for f in fields(HostCosts)}
    unknown = set(data) - known
    if unknown:
        raise SpecError(f"{path}: unknown host-cost fields {sorted(unknown)}; known: {sorted(known)}")
    if "optimizer" in data:
        data["optimizer"] = {**DEFAULT_HOST.optimizer, **{k: tuple(v) for k, v in data["optimizer"].items()}}
    return replace(DEFAULT_HOST, **data)


def host_costs_for(gpu_name: str, host: Any = None) -> HostCosts:
    """The host costs to use with ``gpu_name``: ``host`` if given (record or YAML path), else the shipped
    ``specs/hosts/<gpu>.yaml``, else :data:`DEFAULT_HOST`."""
    if isinstance(host, HostCosts):
        return host
    if host is not None:
        if not isinstance(host, (str, os.PathLike)):
            raise ArgumentError(f"host must be a HostCosts record or a path to a host-cost YAML file, got "
                                f"{type(host).__name__}")
        return load_host_costs(host)
    shipped = shipped_root()
    path = shipped / "hosts" / f"{gpu_name}.yaml" if shipped is not None else None
    return load_host_costs(path) if path is not None and path.exists() else DEFAULT_HOST


@dataclass(frozen=True)
class Timeline:
    """Result of :func:`timeline` [s]: the end, the kernels' sum, the device idle waiting for dispatch
    (``host_wait_s``), the synchronisation round trips (``sync_s``), and the host's dispatch sum."""

    seconds: float
    kernel_s: float
    host_wait_s: float
    sync_s: float
    host_s: float


def timeline(host: np.ndarray, device: np.ndarray, sync_after: np.ndarray, item_s: float) -> Timeline:
    """Evaluate the two-resource timeline of a sequence of kernels.

    Parameters
    ----------
    host : array
        Host seconds spent before each kernel is launched (its dispatch).
    device : array
        Each kernel's device time [s].
    sync_after : array of bool
        Whether the host waits for the device after this kernel (and pays ``item_s``).
    item_s : float
        Cost of one synchronisation round trip [s].

    Returns
    -------
    Timeline
        The step ends when the last kernel ends and the host has synchronised on it.

    Examples
    --------
    >>> import numpy as np
    >>> t = timeline(np.array([1.0, 1.0, 1.0]), np.array([0.5, 3.0, 0.5]), np.zeros(3, bool), 0.0)
    >>> t.seconds, t.host_wait_s   # kernels start at 1, 2 and 5 (the long one hides the third dispatch)
    (5.5, 1.5)
    """
    host, device = np.asarray(host, float), np.asarray(device, float)
    sync_after = np.asarray(sync_after, bool)
    cuts = np.flatnonzero(sync_after[:-1]) + 1
    t_host, t_dev, n_sync = 0.0, 0.0, 0
    for h, d in zip(np.split(host, cuts), np.split(device, cuts)):
        launched = t_host + np.cumsum(h)
        d_cum = np.cumsum(d)
        d_prev = np.concatenate(([0.0], d_cum[:-1]))
        start_lag = np.maximum.accumulate(np.maximum(launched - d_prev, t_dev))
        end = float(d_cum[-1] + start_lag[-1]) if len(d) else t_dev
        t_dev = end
        t_host = max(float(launched[-1]) if len(h) else t_host, end) + item_s
        n_sync += 1
    kernel, seconds = float(device.sum()), t_host
    sync = n_sync * item_s
    return Timeline(seconds=seconds, kernel_s=kernel, host_wait_s=max(seconds - kernel - sync, 0.0), sync_s=sync,
                    host_s=float(host.sum()))
