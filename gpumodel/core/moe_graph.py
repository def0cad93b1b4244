"""The mixture-of-experts block of ``transformers`` 5 (mixtral, qwen2_moe), tensor by tensor.

The experts run through ``torch._grouped_mm`` on the token copies sorted by expert: router logits and their fp32
softmax, the top-k choice (mixtral renormalises the weights and keeps them in fp32, qwen2_moe casts them to the
model's dtype), the ``T x k`` routed copies of the hidden states gathered, the gate-up and down products over all
experts (each written to a second buffer), SiLU and the product of the two halves, the weighted outputs scattered
back and summed over the k copies. qwen2_moe adds a shared expert (a gated MLP) scaled by a sigmoid gate.

``torch._grouped_mm`` has no autocast rule (pytorch/pytorch#174763), and ``transformers`` casts the routed tokens to
the expert weights' dtype before it (``_grouped_mm`` in ``transformers/integrations/moe.py``): under autocast with
fp32 weights the experts run in fp32, with no 16-bit copy of their weights and every routed tensor in fp32 (the
router and the shared expert are ``nn.Linear`` and go through autocast as the rest of the model).

Examples
--------
>>> import gpumodel as gm
>>> from gpumodel.core.autograd_tape import Tape
>>> from gpumodel.core.step_graph import StepShape
>>> shape = StepShape(gm.TransformerConfig.from_hf(dict(model_type="mixtral", hidden_size=64,
...     num_hidden_layers=1, num_attention_heads=4, intermediate_size=128, vocab_size=256, num_local_experts=4,
...     num_experts_per_tok=2)), 1, 16, "bf16")
>>> routed_bytes(shape) // 2**10       # the T x k gathered copies of the hidden states [KiB]
4
"""

from __future__ import annotations

from .autograd_tape import Tensor, add, cast, mul, new_grad, op, pointwise, share_grad, view

__all__ = ["experts_block", "routed_bytes"]


def routed_bytes(shape) -> int:
    """Bytes of the routed copies of the hidden states (``T x k x hidden``, compute dtype) [B]."""
    return shape.T * shape.k * shape.h * shape.a


def _small(g, *sizes):
    return [g.tape.new(n) for n in sizes]


def _free(g, handles):
    for h in handles:
        g.tape.dec(h)


def _grouped_mm(g, sc, x, w, el, nb):
    """``torch._grouped_mm``: saves input and weight; backward: the weight's gradient, then the input's."""
    def back(g, gr):
        gw = new_grad(g, w.n)
        _free(g, _small(g, 3600, 67584)[::-1])
        gx = new_grad(g, x.n)
        _free(g, _small(g, 3600, 67584)[::-1])
        return [gx, gw]
    out = op(g, sc, [x, w], el, nb, back, save_in=[w, x])
    _free(g, _small(g, 3600, 67584)[::-1])
    return out


def _gather(g, sc, x, rows_el, copy_first, tk):
    """``x[index]``; backward: ``index_put`` with accumulation into zeros (the ``tk`` indices sorted first)."""
    def back(g, gr):
        if copy_first:      # the incoming gradient, an expanded view, made contiguous
            c = g.tape.new(rows_el * x.nb)
            res = new_grad(g, x.n)
            _free(g, _small(g, tk * 8, tk * 8, tk * 8, tk * 16)[::-1])
            g.tape.dec(c)
        else:
            _free(g, _small(g, tk * 8, tk * 8, tk * 8, tk * 16)[::-1])
            res = new_grad(g, x.n)
        return [res]
    return op(g, sc, [x], rows_el, x.nb, back)


def _softmax(g, sc, x):
    """fp32 softmax: saves its result; backward: the gradient, then a temporary."""
    def back(g, gr):
        out = new_grad(g, x.n)
        g.tape.dec(g.tape.new(x.n))
        return [out]
    return op(g, sc, [x], x.el, 4, back, save_out=True)


def experts_block(st, sc, xn, i):
    """The MoE block of layer ``i`` on the normed hidden states ``xn``; returns its output (held by ``sc``)."""
    d, g, T = st.d, st.g, st.d.T
    Tk, a, p = T * d.k, d.a, st.m.p
    shared = st.ffn(sc, xn, f"{i}.sgate", f"{i}.sup", f"{i}.sdown", d.Is) if d.Is else None
    logits = st.proj(sc, xn, f"{i}.router", d.E)
    lf = cast(g, sc, logits, 4)
    probs = _softmax(g, sc, lf)
    sc.drop(lf)
    vals = op(g, sc, [probs], Tk, 4, lambda g, gr: [new_grad(g, probs.n)])   # top-k; its indices beside it
    idx, = sc.new(Tk * 8)   # index tensors are the function's locals: freed as it returns or its recompute stops
    if d.norm_topk:
        total = pointwise(g, sc, vals, T, 4)
        weights = mul(g, sc, vals, total, Tk, 4, reduce_b=False)
    else:
        weights = cast(g, sc, vals, d.routing_nb)
        sc.drop(vals)
        vals = total = None
    keep = sc.new(Tk * 8, Tk * 8, Tk * 8)              # flat expert ids, their sort
    _free(g, _small(g, 2 * Tk * 8 + 1))
    sc.free(keep.pop())
    keep += sc.new(Tk * 8)
    xs0 = _gather(g, sc, xn, Tk * d.h, False, Tk)
    xs = view(g, sc, xs0, lambda g, gr: [new_grad(g, xs0.n)])
    sc.drop(xs0)
    sw = op(g, sc, [weights], Tk, d.routing_nb, lambda g, gr: [new_grad(g, weights.n)])
    keep += sc.new(Tk * 4, d.E * 4, d.E * 4)           # counts and offsets of the groups
    _free(g, _small(g, 1023))
    keep += sc.new(Tk)
    ew = p[f"{i}.gu"].nb    # the experts' dtype: their weights' (fp32 under autocast, see above)
    xw = cast(g, sc, xs, ew)
    sc.drop(xs)
    gu_raw = _grouped_mm(g, sc, xw, p[f"{i}.gu"], Tk * 2 * d.Ie, ew)
    sc.drop(xw)
    gu = op(g, sc, [gu_raw], gu_raw.el, ew, lambda g, gr: [new_grad(g, gu_raw.n)])
    sc.drop(gu_raw)
    g.begin()           # chunk(2): two views of one node, whose backward concatenates both gradients
    fn = g.node([gu], lambda g, gr: [new_grad(g, gu.n)], []) if g.wants(gu) else None
    gate = sc.hold(Tensor(g.tape.inc(gu.h), Tk * d.Ie, ew, fn, 0))
    up = sc.hold(Tensor(g.tape.inc(gu.h), Tk * d.Ie, ew, fn, 1))
    act = pointwise(g, sc, gate, gate.el, ew, save="in")
    m = mul(g, sc, act, up, act.el, ew)
    sc.drop(act, gate, up, gu)
    dn_raw = _grouped_mm(g, sc, m, p[f"{i}.dn"], Tk * d.h, ew)
    dn = op(g, sc, [dn_raw], dn_raw.el, ew, lambda g, gr: [new_grad(g, dn_raw.n)])
    sc.drop(dn_raw, m)
    wd = mul(g, sc, dn, sw, Tk * d.h, max(ew, d.routing_nb), reduce_b=False)
    sc.drop(dn)
    inv = sc.new(Tk * 8, Tk * 8)
    sc.free(inv.pop())
    un = _gather(g, sc, wd, Tk * d.h, True, Tk)
    sc.drop(wd)
    out = op(g, sc, [un], T * d.h, un.nb, lambda g, gr: [share_grad(g, gr[0], view=True, n=un.n)])   # sum over k
    sc.free(*inv)
    if out.nb != xn.nb:     # .to(hidden_states.dtype)
        cast_out = cast(g, sc, out, xn.nb)
        sc.drop(un, out)
        out = cast_out
    else:
        sc.drop(un)
    if shared is not None:
        gate_logit = st.proj(sc, xn, f"{i}.sg", 1)
        sig = pointwise(g, sc, gate_logit, T, a, save="out")
        sc.drop(gate_logit)
        scaled = mul(g, sc, sig, shared, T * d.h, a, reduce_a=False)
        total_out = add(g, sc, out, scaled, T * d.h, max(out.nb, scaled.nb))
        sc.drop(out, scaled, shared, sig)
        out = total_out
    sc.free(*keep, idx)
    sc.drop(logits, probs, sw, weights, vals, total)
    return out
