"""The backward of a mixture of experts' routed experts in ``transformers`` 5: what it holds beyond the saved tensors.

``grouped_mm_experts_forward`` (``transformers/integrations/moe.py``) runs the routed experts on the ``Tk = T x k``
token copies sorted by expert: the gate-up ``torch._grouped_mm`` (``E x 2I x h`` weights), SiLU of the gate half
times the up half, the down ``torch._grouped_mm`` (``E x h x I``), the product with the routing weights, the
copies put back in token order and summed over the ``k`` choices. Autograd runs that backward in reverse, and each
node frees what it saved once it has run, so the layer's largest moment is one of four, each counted here beyond
everything the layer saved and the gradient of its output hidden states:

``routing product``
    ``weighted_out = proj_out * sample_weights``: the incoming gradient (the un-permute's, ``Tk x h``) and the
    gradients for both inputs (the routing weights' before it is summed over ``h``), all in the product's dtype.
    Mixtral keeps its routing weights in fp32 (``MixtralTopKRouter``: ``router_top_value /= ...`` with no cast
    back; Qwen2-MoE and Qwen3-MoE cast them to the router logits' dtype), so its product and both gradients are
    fp32 even in bf16: ``3 Tk h 4``. The engine then casts the down output's gradient to its dtype
    (``validate_outputs``) before it releases what the node saved; tensors recomputed from a checkpoint are
    released earlier, when the node that unpacked them returns, so only without checkpointing does the cast
    (``Tk x h`` in the experts' dtype) come on top.
``down projection``
    the down output the product saved is gone, its gradient arrives in its place; the new ``E x h x I`` gradient
    of ``down_proj`` is made first, then the gradient of the ``Tk x I`` input.
``SiLU x up``
    the down input (saved by the grouped mm) is gone; the incoming ``Tk x I`` gradient and the two it makes.
``gate-up projection``
    SiLU's and the product's saved tensors (the ``Tk x 2I`` gate-up output, the ``Tk x I`` SiLU output) are gone,
    their gradient (``Tk x 2I``) arrives; the new ``E x 2I x h`` gradient of ``gate_up_proj``, then the input's.

The gate-up weight's gradient, the layer's largest tensor, is therefore made after the down projection's
activations are freed; with gradient accumulation the new gradient of each weight stands beside the held one
until ``AccumulateGrad`` adds it in place. A shared expert (Qwen2-MoE) runs its backward after the routed experts:
its output's gradient waits through all four moments.

Examples
--------
Mixtral-8x7B's layer (h 4096, I 14336, 8 experts, 2 a token) on 8,192 bf16 tokens with gradient accumulation: the
down projection's backward, 0.875 GiB of new ``down_proj`` gradient and 0.4375 GiB of input gradient, beats the
gate-up projection's (1.75 GiB of new gradient less the 0.875 GiB its saved inputs gave back):

>>> import gpumodel as gm
>>> from gpumodel.vocabulary import precision
>>> cfg = gm.model("mixtral-8x7b")
>>> round(float(routed_backward_bytes(cfg, 8192, precision("bf16"), new_gradients=True)) / 2**30, 4)
1.3125
"""

from __future__ import annotations

import numpy as np

from ..records.transformer import TransformerConfig
from ..vocabulary import Precision
from .activations import expert_bytes, precision_bytes

__all__ = ["routing_bytes", "routed_backward_bytes"]


def routing_bytes(cfg: TransformerConfig, precision: Precision) -> int:
    """Bytes of an element of the routing weights the expert outputs are multiplied by [B].

    Mixtral's router normalises its top-k softmax values in fp32 and returns them as they are; Qwen2-MoE and
    Qwen3-MoE (and the others that follow them) cast them to the router logits' dtype, the compute dtype.

    >>> import gpumodel as gm
    >>> from gpumodel.vocabulary import precision
    >>> routing_bytes(gm.model("mixtral-8x7b"), precision("bf16")), routing_bytes(gm.model("mixtral-8x7b"), precision("fp32"))
    (4, 4)
    """
    return 4 if cfg.family == "mixtral" else precision_bytes(precision)[1]


def routed_backward_bytes(cfg: TransformerConfig, tokens, precision: Precision, *, new_gradients,
                          kept_gradients=False, recomputed: bool = True, tp: int = 1,
                          ep: int = 1) -> np.ndarray:
    """Largest bytes the backward of one layer's routed experts holds beyond the layer's saved tensors [B].

    Parameters
    ----------
    cfg : TransformerConfig
        A mixture of experts.
    tokens : int or array
        Tokens of the micro-batch on this GPU [tokens].
    precision : Precision
    new_gradients : bool or array
        Count the expert weights' gradients the backward makes (they are not among the moment's gradients: a new
        gradient beside the held one, or the layer's first gradient).
    kept_gradients : bool or array
        The ``down_proj`` gradient stays once made (it is the parameter's gradient: no accumulation); otherwise
        it is added to the held one and freed before the next moment.
    recomputed : bool
        The layer's saved tensors were recomputed from its checkpoint (they go before the engine casts a node's
        gradients), rather than saved by its forward (they go after).
    tp, ep : int
        Tensor- and expert-parallel degrees: the routed tensors divide by ``tp``, the expert weights by ``tp * ep``.

    Returns
    -------
    ndarray
        Bytes [B]: the largest of the four moments of the module's docstring, plus the gradient of the shared
        expert's output where there is one.

    Notes
    -----
    With ``Tk = k T / tp`` routed copies, ``e`` bytes an expert element, ``p`` bytes of the routing product,
    ``G_d = E h I w / (tp ep)`` and ``G_gu = 2 G_d`` the new gradients (``n`` = ``new_gradients``,
    ``s`` = ``kept_gradients``, ``c`` = ``T_k h e`` where ``p != e`` and the saved tensors are not
    recomputed, else 0):

    .. math:: \\max(3 T_k h p + c,\\; T_k I e + n G_d,\\; 2 T_k I e - T_k h e + n s G_d,\\;
              n G_{gu} - 2 T_k I e + n s G_d)

    Examples
    --------
    >>> import gpumodel as gm
    >>> from gpumodel.vocabulary import precision
    >>> cfg = gm.model("mixtral-8x7b")
    >>> round(float(routed_backward_bytes(cfg, 32768, precision("bf16"), new_gradients=True)) / 2**30, 3)
    3.0
    """
    tokens = np.asarray(tokens, dtype=float)
    w, a, _ = precision_bytes(precision)
    e, p = expert_bytes(precision), max(expert_bytes(precision), routing_bytes(cfg, precision))
    h, i = cfg.hidden_size, cfg.expert_size
    tk = cfg.experts_per_token * tokens / tp
    new = np.asarray(new_gradients, dtype=float)
    kept = new * np.asarray(kept_gradients, dtype=float)
    down = cfg.num_experts * h * i * w / (tp * ep)     # E x h x I
    gate_up = 2 * down                                 # E x 2I x h
    product = 3 * tk * h * p + (tk * h * e if p != e and not recomputed else 0.0)
    down_mm = tk * i * e + new * down
    silu_up = 2 * tk * i * e - tk * h * e + kept * down
    gate_up_mm = new * gate_up - 2 * tk * i * e + kept * down
    shared = a * h * tokens if cfg.shared_expert_intermediate_size else 0.0
    return np.maximum(np.maximum(product, down_mm), np.maximum(silu_up, gate_up_mm)) + shared
