"""The allocations of a PyTorch forward and backward pass, op by op, as autograd makes them.

A :class:`Graph` records what each op allocates in the forward, what it saves for the backward and what its
backward allocates, and then runs the backward the way ``torch.autograd``'s engine does:

* nodes run in the reverse of their creation (the engine's ready queue is ordered by sequence number);
* a node's gradients are computed (in the reverse order of its inputs: ``mm`` the weight's first), then reduced
  or cast to each input's shape and dtype (``validate_outputs``), then the incoming gradient is freed, then
  what the node saved (``release_variables``);
* a gradient arriving where one is already buffered is added in place when the buffered one may be reused
  (not a view of a product), else into a new tensor (``InputBuffer::accumulate``); a parameter keeps the
  first gradient it gets (``AccumulateGrad``), and one reached twice (tied input and output embeddings) sums the
  second into it the same way: a new tensor where the first is a view (a linear layer's weight gradient, the
  transpose of the product ``mm`` computes; measured: the bf16 Llama-3.2-1B step's trace allocates the sum, the
  amp Llama-3.2-3B step's, whose first is the cast's fresh fp32 copy, adds in place);
* a checkpointed block (``torch.utils.checkpoint`` without reentrance) saves nothing; the first node that needs
  a saved tensor recomputes the block up to its last saved tensor, and recomputed tensors go when the node that
  unpacked them returns. The recomputation stops there by raising, so every tensor its functions' locals still
  hold (activations and index tensors alike) is freed at that point unless it was saved.

Python's references are explicit: a :class:`Scope` holds what a function's locals hold and drops it where the
function would. The result is a list of ``(key, bytes)`` events for :func:`~gpumodel.core.allocator.simulate_allocator`.

Examples
--------
A weight of 4 bf16 values times activations of 8 tokens (``w`` broadcast over the tokens):

>>> tape = Tape()
>>> g, sc = Graph(tape, tokens=8), Scope(tape)
>>> w = Tensor(tape.new(8), 4, 2, Leaf(0))
>>> x = Tensor(tape.new(64), 32, 2, Leaf(1))
>>> y = mul(g, sc, w, x, 32, 2, reduce_a=True)
>>> start = len(tape.events)
>>> g.backward(y.fn, Grad(tape.new(64), 64))
>>> [n for _, n in tape.events[start:] if n]    # seed, x's and w's gradients, w's summed (with a workspace)
[64, 64, 64, 8, 4096, 1]
"""

from __future__ import annotations

import heapq

__all__ = ["Tape", "Tensor", "Grad", "Leaf", "Node", "Frame", "Graph", "Scope", "Stop", "reduce_workspace",
           "op", "view", "cast", "pointwise", "passthrough", "mul", "add", "cat", "linear", "new_grad",
           "share_grad", "SMS_H100"]

#: streaming multiprocessors of an H100 / H200 (the global reductions fill the GPU with 4 blocks an SM)
SMS_H100 = 132


class Stop(Exception):
    """A checkpointed recomputation reached its last saved tensor."""


class Tape:
    """Allocation events with reference counts: ``new`` allocates, ``dec`` of the last reference frees."""

    def __init__(self):
        self.events: list[tuple[int, int]] = []
        self.refs: dict[int, int] = {}
        self.n = 0

    def new(self, nbytes) -> int:
        self.n += 1
        self.refs[self.n] = 1
        self.events.append((self.n, max(int(nbytes), 1)))
        return self.n

    def inc(self, h: int) -> int:
        self.refs[h] += 1
        return h

    def dec(self, h: int) -> None:
        r = self.refs[h] - 1
        if r:
            self.refs[h] = r
        else:
            del self.refs[h]
            self.events.append((h, 0))


class Tensor:
    """A forward tensor: its storage, elements, bytes an element, and where its gradient goes."""
    __slots__ = ("h", "el", "nb", "fn", "slot")

    def __init__(self, h, el, nb, fn=None, slot=0):
        self.h, self.el, self.nb, self.fn, self.slot = h, el, nb, fn, slot

    @property
    def n(self) -> int:
        return self.el * self.nb


class Grad:
    """A gradient: its storage, bytes, and whether it is a view (then never added to in place)."""
    __slots__ = ("h", "n", "view")

    def __init__(self, h, n, view=False):
        self.h, self.n, self.view = h, n, view


class Leaf:
    """A parameter: it keeps the first gradient it receives (``grad``; ``grad_view``: that gradient is a view) and
    sums the later ones into it, in place unless it is a view (autograd's input buffer)."""
    __slots__ = ("index", "grad", "grad_view")

    def __init__(self, index):
        self.index, self.grad, self.grad_view = index, None, False


class Node:
    """A backward function: its inputs' edges, what it saved, and the allocations of its backward."""
    __slots__ = ("seq", "edges", "saved", "back", "frame", "nsaved")

    def __init__(self, seq, edges, back):
        self.seq, self.edges, self.back = seq, edges, back
        self.saved, self.frame, self.nsaved = [], None, 0


class Frame:
    """A checkpointed block: its nodes, the inputs it keeps, and how to recompute it."""

    def __init__(self, run, inputs):
        self.run, self.inputs, self.nodes, self.done = run, inputs, [], False

    def last_saver(self):
        """The earliest node that saves tensors: once it ran, the frame and the inputs it keeps go."""
        return next((n for n in self.nodes if n.nsaved), None)


#: the node recomputed ops record (none: the gradients flow through the nodes of the original forward)
RECOMPUTED = Node(0, [], None)


def reduce_workspace(outputs: int, tokens: int, sms: int = SMS_H100) -> int:
    """Bytes of the staging buffer of a sum over the tokens split across blocks (``ReduceConfig``): fp32 partial
    sums of 256 outputs a block column, with as many blocks an output as fill the GPU (4 blocks of 512 threads
    an SM) or as the tokens allow (one per 128)."""
    ctas = min(-(-sms * 4 * 256 // outputs), -(-tokens // 128))
    return 4 * outputs * 256 * ctas


def finish(g, o):
    """``validate_outputs``: reduce the gradient of a broadcast input to its shape, or cast it to its dtype."""
    if not isinstance(o, tuple):
        return o
    kind, gr, n_out, el = o
    out = Grad(g.tape.new(n_out), n_out)
    if kind == "tokens":
        ws = g.tape.new(reduce_workspace(el, g.tokens, g.sms))
        g.tape.dec(g.tape.new(max(el // 32, 1)))
        g.tape.dec(ws)
    g.tape.dec(gr.h)
    return out


class Graph:
    """Records the nodes of a forward and runs their backward."""

    def __init__(self, tape, tokens=1, sms=SMS_H100):
        self.tape, self.tokens, self.sms = tape, tokens, sms
        self.seq = 0
        self.grad = True           # autograd records
        self.saving = True         # saved tensors are kept (not inside a checkpointed forward)
        self.frame = None          # the checkpointed block being recorded
        self.recompute = None      # [saved handles, how many remain] while a block is recomputed
        self.first_mm = None       # allocation the next first matmul makes (its cuBLAS workspace): first_matmul
        self.count = 0

    def first_matmul(self) -> None:
        """A matmul runs: the first after ``first_mm`` was set allocates what it holds (cuBLAS's workspace), once."""
        if self.first_mm is not None:
            self.first_mm()
            self.first_mm = None

    def wants(self, *inputs) -> bool:
        return self.grad and any(t is not None and t.fn is not None for t in inputs)

    def begin(self) -> None:
        self.count = 0

    def save(self, tensors) -> list[int]:
        """An op that records a node keeps these tensors; while recomputing, the last one stops it."""
        out = []
        for t in tensors:
            if t is None:
                continue
            self.count += 1
            if self.recompute is not None:
                self.recompute[0].append(self.tape.inc(t.h))
                self.recompute[1] -= 1
                if self.recompute[1] == 0:
                    raise Stop
            elif self.saving:
                out.append(self.tape.inc(t.h))
        return out

    def node(self, inputs, back, saved) -> Node:
        if self.recompute is not None:
            return RECOMPUTED
        self.seq += 1
        n = Node(self.seq, [(t.fn, t.slot) if t is not None and t.fn is not None else None for t in inputs], back)
        n.saved, n.nsaved = saved, self.count
        if self.frame is not None:
            n.frame = self.frame
            self.frame.nodes.append(n)
        return n

    def backward(self, root: Node, seed: Grad) -> None:
        """``loss.backward()``: run the nodes reachable from ``root``, the latest first."""
        tape = self.tape
        buf = {root: [seed]}
        heap = [(-root.seq, root.seq, root)]
        while heap:
            node = heapq.heappop(heap)[2]
            grads = buf.pop(node)
            fr = node.frame
            if fr is not None and not fr.done and node.nsaved:
                self._recompute(fr)
            outs = node.back(self, grads)
            if fr is not None:          # recomputed tensors: held by the backward's locals, gone when it returns
                for h in node.saved[::-1]:
                    tape.dec(h)
            outs = [finish(self, o) for o in outs]
            for gr in grads:
                if gr is not None:
                    tape.dec(gr.h)
            if fr is None:
                for h in node.saved:
                    tape.dec(h)
            node.saved = []
            if fr is not None and node is fr.last_saver():
                for h in fr.inputs:
                    tape.dec(h)
                fr.inputs = []
            for edge, gr in zip(node.edges, outs):
                if gr is None:
                    continue
                if edge is None:
                    tape.dec(gr.h)
                elif isinstance(edge[0], Leaf):
                    leaf = edge[0]
                    if leaf.grad is None:
                        leaf.grad, leaf.grad_view = gr.h, gr.view
                    elif leaf.grad_view:    # the buffered view cannot take the sum: a new tensor, both freed
                        total = tape.new(gr.n)
                        tape.dec(leaf.grad)
                        tape.dec(gr.h)
                        leaf.grad, leaf.grad_view = total, False
                    else:
                        tape.dec(gr.h)
                else:
                    self._accumulate(buf, heap, edge, gr)

    def _accumulate(self, buf, heap, edge, gr) -> None:
        target, slot = edge
        slots = buf.get(target)
        if slots is None:
            slots = buf[target] = [None, None]
            heapq.heappush(heap, (-target.seq, target.seq, target))
        old = slots[slot]
        if old is None:
            slots[slot] = gr
        elif not old.view and self.tape.refs[old.h] == 1:
            self.tape.dec(gr.h)
        else:
            s = Grad(self.tape.new(gr.n), gr.n)
            self.tape.dec(old.h)
            self.tape.dec(gr.h)
            slots[slot] = s

    def _recompute(self, fr: Frame) -> None:
        fr.done = True
        state = (self.grad, self.saving, self.frame)
        self.grad, self.saving, self.frame = True, True, None
        self.recompute = [[], sum(n.nsaved for n in fr.nodes)]
        scope = Scope(self.tape)
        try:
            fr.run(scope)
        except Stop:
            scope.close()
        flat = self.recompute[0]
        self.recompute = None
        self.grad, self.saving, self.frame = state
        i = 0
        for n in fr.nodes:
            n.saved = flat[i:i + n.nsaved]
            i += n.nsaved


class Scope:
    """The references a Python function holds; those left when a recomputation stops go in reverse."""

    def __init__(self, tape):
        self.tape, self.held = tape, []

    def hold(self, t):
        self.held.append(t.h)
        return t

    def drop(self, *tensors) -> None:
        for t in tensors:
            if t is not None:
                self.held.remove(t.h)
                self.tape.dec(t.h)

    def new(self, *sizes) -> list[int]:
        """Allocate storages a local holds outside autograd (index tensors), in order; dropped as the rest."""
        out = [self.tape.new(n) for n in sizes]
        self.held += out
        return out

    def free(self, *handles) -> None:
        """Release storages taken with :meth:`new`, in the order given."""
        for h in handles:
            self.held.remove(h)
            self.tape.dec(h)

    def close(self) -> None:
        while self.held:
            self.tape.dec(self.held.pop())


# ---------------------------------------------------------------------------------------------------- ops
def new_grad(g, n, view=False) -> Grad:
    return Grad(g.tape.new(n), n, view)


def share_grad(g, gr, view=None, n=None) -> Grad:
    return Grad(g.tape.inc(gr.h), gr.n if n is None else n, gr.view if view is None else view)


def op(g, sc, inputs, el, nb, back, save_in=(), save_out=False) -> Tensor:
    """Allocate an op's output (inputs saved before, the output after) and record its node."""
    g.begin()
    want = g.wants(*inputs)
    saved = g.save(save_in) if want else []
    out = sc.hold(Tensor(g.tape.new(el * nb), el, nb))
    if want and save_out:
        saved += g.save([out])
    if want:
        out.fn = g.node(list(inputs), back, saved)
    return out


def view(g, sc, x, back=None) -> Tensor:
    """A view of x; its node passes the gradient on as a view, or runs ``back`` (a copy)."""
    t = sc.hold(Tensor(g.tape.inc(x.h), x.el, x.nb))
    g.begin()
    if g.wants(x):
        t.fn = g.node([x], back or (lambda g, gr: [share_grad(g, gr[0], view=True, n=x.n)]), [])
    return t


def cast(g, sc, x, nb) -> Tensor:
    """``x.to(dtype)``: a copy when the dtype changes, else x itself."""
    if nb == x.nb:
        g.tape.inc(x.h)
        return sc.hold(x)
    return op(g, sc, [x], x.el, nb, lambda g, gr: [new_grad(g, x.n)])


def grad_through(g, n, temps) -> Grad:
    """A gradient computed through temporaries (``pow``: x.pow(1), times 2, times grad), freed in reverse."""
    t = [g.tape.new(n) for _ in range(temps)]
    out = new_grad(g, n)
    for h in t[1:][::-1] + t[:1]:
        g.tape.dec(h)
    return out


def pointwise(g, sc, x, el, nb, save="", temps=0) -> Tensor:
    """An op of one input: ``save`` "in" (pow, silu) or "out" (rsqrt, softmax); its gradient has x's size."""
    return op(g, sc, [x], el, nb, lambda g, gr: [grad_through(g, x.n, temps)],
              save_in=[x] if save == "in" else (), save_out=save == "out")


def passthrough(g, sc, x) -> Tensor:
    """``x + scalar``: the gradient passes unchanged."""
    return op(g, sc, [x], x.el, x.nb, lambda g, gr: [share_grad(g, gr[0])])


def mul(g, sc, a, b, el, nb, reduce_a=None, reduce_b=None) -> Tensor:
    """``a * b``: gradients for b then a, in the product's dtype; then a broadcast input's is summed
    (``reduce_x``: True over the tokens, False over the last dimension) and the others cast to their dtype."""
    n_out = el * nb

    def back(g, gr):
        gb = new_grad(g, n_out) if b.fn is not None else None
        ga = new_grad(g, n_out) if a.fn is not None else None
        out = []
        for gx, x, red in ((ga, a, reduce_a), (gb, b, reduce_b)):
            if gx is not None and red is not None:
                gx = ("tokens" if red else "last", gx, x.n, x.el)
            elif gx is not None and x.n != n_out:
                gx = ("cast", gx, x.n, 0)
            out.append(gx)
        return out
    save = ([b] if a.fn is not None else []) + ([a] if b.fn is not None else [])
    return op(g, sc, [a, b], el, nb, back, save_in=save)


def add(g, sc, a, b, el, nb) -> Tensor:
    """``a + b``: the gradient goes to both, cast to an input's dtype where it differs."""
    def back(g, gr):
        return [None if t is None or t.fn is None else
                (("cast", share_grad(g, gr[0]), t.n, 0) if t.n != gr[0].n else share_grad(g, gr[0])) for t in (a, b)]
    return op(g, sc, [a, b], el, nb, back)


def cat(g, sc, parts, el, nb) -> Tensor:
    """``torch.cat``: the gradient narrowed for each input (views), cast where an input's dtype differs."""
    def back(g, gr):
        return [None if t is None or t.fn is None else
                (("cast", share_grad(g, gr[0], view=True, n=t.el * nb), t.n, 0) if t.nb != nb
                 else share_grad(g, gr[0], view=True, n=t.n)) for t in parts]
    return op(g, sc, list(parts), el, nb, back)


def linear(g, sc, x, w, el, nb, bias=None) -> Tensor:
    """``x @ W.T (+ b)`` in the compute dtype: saves x and W; backward: ``mm`` the weight's gradient then the
    input's (a view of a 2-D product, or a plain tensor for one output feature), ``addmm`` the input's first,
    and the bias gradient reduced over the tokens."""
    one = el == g.tokens

    def back(g, gr):
        order = ("w", "x") if bias is None else ("x", "w")
        made = {}
        for k in order:
            t = w if k == "w" else x
            if t.fn is not None:
                # the input's: a view of the 2-D product; the weight's: the transpose of the product mm computes
                made[k] = new_grad(g, t.n, view=(k == "w" or not one))
                g.first_matmul()                # the mm's output is allocated, then cuBLAS takes its workspace
        gb = ("tokens", share_grad(g, gr[0]), bias.n, bias.el) if bias is not None and bias.fn is not None else None
        return [made.get("x"), made.get("w"), gb]
    return op(g, sc, [x, w, bias], el, nb, back, save_in=[w, x])
