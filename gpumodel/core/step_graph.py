"""The forward and backward of a Hugging Face decoder (llama, qwen2, mixtral, qwen2_moe), tensor by tensor.

Each block allocates what the ``transformers`` 5 module allocates, in its order, with the dtypes of the
precision mode, and frees what Python frees when a variable is rebound or a function returns:

* RMSNorm: ``x.float()``, ``pow(2)``, ``mean``, ``+ eps``, ``rsqrt``, the product, its cast back, the weight
  product;
* attention: the q, k, v projections (with bias for qwen2), RoPE (``x * cos + rotate_half(x) * sin``), the
  KV-cache copies a training forward makes with ``use_cache``, flash attention through SDPA (output, log-sum-exp,
  RNG state; a backward workspace), the output projection;
* the gated MLP (gate, SiLU, up, product, down); for a mixture of experts the router (fp32 softmax, top-k), the
  tokens gathered by expert, ``torch._grouped_mm`` over the experts, the weighted scatter back, and qwen2_moe's
  shared expert with its sigmoid gate;
* the head: the logits, their fp32 copy, ``log_softmax`` and ``nll_loss`` of ``ForCausalLMLoss``;
* under autocast each matmul input is cast to 16 bits and each weight once a forward (cached until the forward
  ends).

Examples
--------
>>> from gpumodel.core.autograd_tape import Graph, Tape
>>> import gpumodel as gm
>>> tape = Tape()
>>> shape = StepShape(gm.model("llama-3.2-1b"), 1, 128, "bf16")
>>> model = ModelTensors(tape, shape)
>>> len(model.order)                    # parameter tensors: embedding, 16 layers of 9, the final norm (tied head)
146
"""

from __future__ import annotations

from .autograd_tape import (Frame, Graph, Leaf, Scope, Tensor, add, cast, cat, linear, mul, new_grad, op,
                            passthrough, pointwise, view)
from .moe_graph import experts_block
from ..records.transformer import TransformerConfig

__all__ = ["StepShape", "ModelTensors", "StepGraph", "parameter_elements"]


class StepShape:
    """The sizes a step's tensors take: model dimensions, tokens, and the bytes of each dtype in use."""

    def __init__(self, cfg: TransformerConfig, batch_size: int, seq_len: int, precision: str,
                 checkpointing: bool = False, use_cache: bool = True):
        self.cfg = cfg
        self.h, self.L, self.V = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
        self.nh, self.nkv, self.hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q, self.kv, self.I = cfg.q_dim, cfg.kv_dim, cfg.intermediate_size
        self.tied, self.bias = cfg.tie_word_embeddings, cfg.qkv_bias
        self.moe = cfg.num_experts > 0
        self.E, self.k, self.Ie = cfg.num_experts, cfg.experts_per_token, cfg.expert_size
        self.Is = cfg.shared_expert_intermediate_size
        self.routing_nb = 4 if cfg.family == "mixtral" else 2     # mixtral keeps its routing weights in fp32
        self.norm_topk = cfg.family == "mixtral"
        self.b, self.s = int(batch_size), int(seq_len)
        self.T = self.b * self.s
        self.amp = precision.startswith("amp")
        self.w = 4 if self.amp else 2        # parameter bytes
        self.a = 2                           # matmul output bytes
        self.r = 4 if self.amp else 2        # residual stream bytes
        self.ckpt = bool(checkpointing)
        self.use_cache = bool(use_cache) and not self.ckpt    # Hugging Face turns the cache off to checkpoint


def parameter_elements(shape: StepShape) -> list[tuple[str, int]]:
    """(name, elements) of the parameters in the order the model creates them (``model.parameters()``)."""
    h, q, kv, I = shape.h, shape.q, shape.kv, shape.I
    out = [("embed", shape.V * h)]
    for i in range(shape.L):
        for nm, n, b in (("q", q * h, q), ("k", kv * h, kv), ("v", kv * h, kv), ("o", h * q, 0)):
            out.append((f"{i}.{nm}", n))
            if shape.bias and b:
                out.append((f"{i}.{nm}.b", b))
        if shape.moe:
            out += [(f"{i}.router", shape.E * h), (f"{i}.gu", shape.E * 2 * shape.Ie * h),
                    (f"{i}.dn", shape.E * h * shape.Ie)]
            if shape.Is:
                out += [(f"{i}.sgate", shape.Is * h), (f"{i}.sup", shape.Is * h), (f"{i}.sdown", h * shape.Is),
                        (f"{i}.sg", h)]
        else:
            out += [(f"{i}.gate", I * h), (f"{i}.up", I * h), (f"{i}.down", h * I)]
        out += [(f"{i}.ln1", h), (f"{i}.ln2", h)]
    out.append(("norm", h))
    if not shape.tied:
        out.append(("head", shape.V * h))
    return out


class ModelTensors:
    """The parameters, allocated in creation order, each a leaf of the graph."""

    def __init__(self, tape, shape: StepShape):
        self.p, self.order = {}, []
        for name, n in parameter_elements(shape):
            t = Tensor(tape.new(n * shape.w), n, shape.w, Leaf(len(self.order)))
            self.p[name] = t
            self.order.append(t)
        if shape.tied:
            self.p["head"] = self.p["embed"]


class StepGraph:
    """One forward of the model on one micro-batch, recorded on ``g``; :meth:`forward` returns the loss."""

    def __init__(self, g: Graph, model: ModelTensors, shape: StepShape):
        self.g, self.m, self.d = g, model, shape

    # ------------------------------------------------------------------------------ blocks
    def wcast(self, name):
        if name not in self.casts:
            self.casts[name] = cast(self.g, self.cast_scope, self.m.p[name], 2)
        return self.casts[name]

    def proj(self, sc, x, name, out_features, bias=None):
        d, g = self.d, self.g
        if d.amp:
            w, b = self.wcast(name), (self.wcast(bias) if bias else None)
            xc = cast(g, sc, x, 2)
        else:
            w, b, xc = self.m.p[name], (self.m.p[bias] if bias else None), x
        y = linear(g, sc, xc, w, d.T * out_features, d.a, b)
        if d.amp:
            sc.drop(xc)
        return y

    def rmsnorm(self, sc, x, wname):
        g, T, el = self.g, self.d.T, x.el
        a1 = cast(g, sc, x, 4)
        a2 = pointwise(g, sc, a1, el, 4, save="in", temps=2)
        a3 = pointwise(g, sc, a2, T, 4)
        sc.drop(a2)
        a4 = passthrough(g, sc, a3)
        a5 = pointwise(g, sc, a4, T, 4, save="out", temps=2)
        sc.drop(a4)
        a6 = mul(g, sc, a1, a5, el, 4, reduce_b=False)
        sc.drop(a5, a1)
        a7 = cast(g, sc, a6, x.nb)
        w = self.m.p[wname]
        a8 = mul(g, sc, w, a7, el, max(x.nb, w.nb), reduce_a=True)
        sc.drop(a7, a6, a3)
        return a8

    def rope(self, sc, x):
        g = self.g
        nb = max(x.nb, self.cos.nb)
        xc = mul(g, sc, x, self.cos, x.el, nb)
        x1 = view(g, sc, x, lambda g, gr: [new_grad(g, x.n)])     # slices: their backward fills a zero tensor
        x2 = view(g, sc, x, lambda g, gr: [new_grad(g, x.n)])
        xn = op(g, sc, [x2], x.el // 2, x.nb, lambda g, gr: [new_grad(g, x.n // 2)])
        xr = cat(g, sc, [xn, x1], x.el, x.nb)
        sc.drop(xn, x2, x1)
        xs = mul(g, sc, xr, self.sin, x.el, nb)
        sc.drop(xr)
        xe = add(g, sc, xc, xs, x.el, nb)
        sc.drop(xc, xs)
        return xe

    def flash(self, sc, q, k, v):
        d, g, T = self.d, self.g, self.d.T
        work = T * d.nh * d.hd * 4 + T * d.nh * 4 + (4 * T * d.nh * d.hd if d.nkv < d.nh else 0) + 256

        def back(g, gr):
            grads = [new_grad(g, q.n), new_grad(g, k.n), new_grad(g, v.n)]
            g.tape.dec(g.tape.new(work))
            return grads
        g.begin()
        saved = g.save([k, q, v])
        seed, offset = g.tape.new(8), g.tape.new(8)
        out = sc.hold(Tensor(g.tape.new(q.el * 2), q.el, 2))
        lse = g.tape.new(T * d.nh * 4)
        g.tape.dec(g.tape.new(256))
        saved += g.save([Tensor(lse, 1, 1), out, Tensor(seed, 1, 1), Tensor(offset, 1, 1)])
        out.fn = g.node([q, k, v], back, saved)
        for h in (lse, seed, offset):
            g.tape.dec(h)
        return out

    def attention(self, sc, x, i):
        d, g = self.d, self.g
        xn = self.rmsnorm(sc, x, f"{i}.ln1")
        heads = []
        for nm, feat, copy_back in (("q", d.q, True), ("k", d.kv, True), ("v", d.kv, d.use_cache)):
            y = self.proj(sc, xn, f"{i}.{nm}", feat, f"{i}.{nm}.b" if d.bias else None)
            # view(b, s, n, hd).transpose(1, 2): the gradient comes back transposed and is copied to reshape
            heads.append(view(g, sc, y, (lambda g, gr, y=y: [new_grad(g, y.n, view=True)]) if copy_back else None))
            sc.drop(y)
        qh, kh, vh = heads
        qe, ke = self.rope(sc, qh), self.rope(sc, kh)
        sc.drop(qh, kh)
        if d.use_cache:     # DynamicCache: torch.cat onto an empty tensor of k's dtype, held until the output goes
            kc = cat(g, sc, [ke], ke.el, ke.nb)
            vc = cat(g, sc, [vh], vh.el, ke.nb)
            self.kv_scope.hold(Tensor(g.tape.inc(kc.h), 1, 1))
            self.kv_scope.hold(Tensor(g.tape.inc(vc.h), 1, 1))
            sc.drop(ke, vh)
            ke, vh = kc, vc
        if d.amp:           # autocast casts the inputs of SDPA
            vb, kb, qb = cast(g, sc, vh, 2), cast(g, sc, ke, 2), cast(g, sc, qe, 2)
        else:
            vb, kb, qb = vh, ke, qe
        o = self.flash(sc, qb, kb, vb)
        if d.amp:
            sc.drop(vb, kb, qb)
        oh = view(g, sc, o)
        out = self.proj(sc, oh, f"{i}.o", d.h)
        sc.drop(oh, o, qe, ke, vh, xn)
        return out

    def ffn(self, sc, xn, gate, up, down, width):
        g = self.g
        gt = self.proj(sc, xn, gate, width)
        sg = pointwise(g, sc, gt, gt.el, gt.nb, save="in")
        sc.drop(gt)
        u = self.proj(sc, xn, up, width)
        m = mul(g, sc, sg, u, sg.el, sg.nb)
        sc.drop(sg, u)
        dn = self.proj(sc, m, down, self.d.h)
        sc.drop(m)
        return dn

    def layer(self, sc, x, i):
        d, g = self.d, self.g
        att = self.attention(sc, x, i)
        r1 = add(g, sc, x, att, x.el, max(x.nb, att.nb))
        sc.drop(att)
        xn = self.rmsnorm(sc, r1, f"{i}.ln2")
        if d.moe:
            mlp = experts_block(self, sc, xn, i)
        else:
            mlp = self.ffn(sc, xn, f"{i}.gate", f"{i}.up", f"{i}.down", d.I)
        sc.drop(xn)
        r2 = add(g, sc, r1, mlp, r1.el, r1.nb)
        sc.drop(mlp, r1)
        return r2

    def checkpoint(self, x, i):
        g, tape = self.g, self.g.tape
        # the frame keeps the layer's arguments: hidden states, position embeddings, cache positions
        fr = Frame(None, [tape.inc(h) for h in (self.cos.h, self.sin.h, self.cpos, x.h)])

        def run(scope):
            casts, cache = self.casts, self.cast_scope
            self.casts, self.cast_scope = {}, scope
            try:
                self.layer(scope, x, i)
            finally:
                self.casts, self.cast_scope = casts, cache
            scope.close()
        fr.run = run
        saving, frame = g.saving, g.frame
        g.saving, g.frame = False, fr
        y = self.layer(Scope(tape), x, i)
        g.saving, g.frame = saving, frame
        return y

    # ------------------------------------------------------------------------------ model
    def rope_tables(self):
        d, tape = self.d, self.g.tape
        tape.dec(tape.new(d.s * 8))
        pos, freqs = tape.new(d.s * 4), tape.new(d.s * d.hd * 2)
        self.g.first_matmul()           # inv_freq @ positions: the step's first matmul takes cuBLAS's workspace
        emb = tape.new(d.s * d.hd * 4)
        c0 = tape.new(d.s * d.hd * 4)
        c1 = tape.new(d.s * d.hd * 4)
        tape.dec(c0)
        s0 = tape.new(d.s * d.hd * 4)
        s1 = tape.new(d.s * d.hd * 4)
        tape.dec(s0)
        if d.r == 2:        # cast to the hidden states' dtype
            cb, sb = tape.new(d.s * d.hd * 2), tape.new(d.s * d.hd * 2)
            self.cos, self.sin = Tensor(cb, d.s * d.hd, 2), Tensor(sb, d.s * d.hd, 2)
            dropped = (pos, freqs, emb, c1, s1)
        else:
            self.cos, self.sin = Tensor(c1, d.s * d.hd, 4), Tensor(s1, d.s * d.hd, 4)
            dropped = (pos, freqs, emb)
        for h in dropped:
            tape.dec(h)

    def forward(self):
        d, g, T, tape = self.d, self.g, self.d.T, self.g.tape
        sc = Scope(tape)
        self.cast_scope, self.kv_scope, self.casts = Scope(tape), Scope(tape), {}
        x0 = op(g, sc, [self.m.p["embed"]], T * d.h, d.w, self.embedding_back)
        self.cpos = tape.new(d.s * 8)
        self.rope_tables()
        x = x0
        for i in range(d.L):
            y = self.checkpoint(x, i) if d.ckpt else self.layer(Scope(tape), x, i)
            if x is not x0:
                tape.dec(x.h)
            x = y
        xf = self.rmsnorm(sc, x, "norm")
        tape.dec(x.h)
        tape.dec(self.cpos)
        sc.drop(x0)
        tape.dec(self.cos.h)
        tape.dec(self.sin.h)
        logits = self.proj(sc, xf, "head", d.V)
        loss = self.loss(sc, logits)
        sc.drop(xf, logits)
        self.kv_scope.close()
        self.cast_scope.close()
        return loss

    def embedding_back(self, g, gr):
        d, T = self.d, self.d.T
        small = [g.tape.new(T * 8) for _ in range(3)]
        g.tape.dec(small.pop())
        gw = new_grad(g, d.V * d.h * d.w)
        small += [g.tape.new(T * 8) for _ in range(4)]
        g.tape.dec(g.tape.new((T + T // 10) * d.h * 4))     # per-segment partial sums (at most T + T/10 rows)
        for h in small[::-1]:
            g.tape.dec(h)
        return [gw]

    def loss(self, sc, logits):
        d, g, T = self.d, self.g, self.d.T
        lf = cast(g, sc, logits, 4)
        pad = g.tape.new(d.b * (d.s + 1) * 8)
        shift = Tensor(g.tape.new(T * 8), T, 8)
        ls = op(g, sc, [lf], lf.el, 4, lambda g, gr: [new_grad(g, lf.n)], save_out=True)
        g.begin()
        saved = g.save([shift])
        nll, tw = Tensor(g.tape.new(4), 1, 4), Tensor(g.tape.new(4), 1, 4)
        saved += g.save([tw])
        nll.fn = g.node([ls], lambda g, gr: [new_grad(g, ls.n)], saved)
        sc.drop(ls, lf)
        for h in (pad, shift.h, tw.h):
            g.tape.dec(h)
        return nll

