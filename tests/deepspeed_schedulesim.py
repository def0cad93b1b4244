"""DeepSpeed's pipeline schedule (``TrainSchedule``) played out op by op, its sends blocking: the reference for how
:func:`gpumodel.cluster.composition.compose` prices DeepSpeed's stage-to-stage sends.

**DeepSpeed's order** (``deepspeed/runtime/pipe/schedule.py``, ``TrainSchedule.steps``, v0.3-v0.5 and since): a
stage runs ``2 (m + pp - 1)`` steps; at each step it runs a forward or a backward (even stages forward on even steps,
odd stages on odd ones; the micro-batch index of :func:`stage_commands`; none in the warm-up and cool-down), and
before it exchanges with one neighbour: before a forward, receive the activations of this micro-batch from the
previous stage and send it the gradient of the previous step's backward; before a backward, send the next stage
the previous step's forward output and receive this micro-batch's gradient from it.

**Blocking sends** (``deepspeed/runtime/pipe/p2p.py``: ``send`` and ``recv`` with ``async_op=False``, PyTorch's
``dist.send``/``dist.recv``): a transfer starts when both sides have reached it and holds both for its duration.
:func:`play` times the ops: a compute op takes ``F`` or ``B``; a transfer, ``send_s`` after the later of the two
sides arrives (``blocking=False``: the sender posts it and goes on, the receiver waits for the data).

``tests/test_deepspeed_schedulesim.py`` checks that with free sends the schedule takes 1F1B's
``(m + pp - 1)(F + B)``, and that blocking exposes about twice the send time that asynchronous sends do.

References
----------
deepspeedai/DeepSpeed, ``deepspeed/runtime/pipe/schedule.py`` (``TrainSchedule``, ``_step_to_micro_batch``) and
``deepspeed/runtime/pipe/p2p.py`` (``send``, ``recv``), v0.5.4 (2021).
"""

from __future__ import annotations

__all__ = ["stage_commands", "play"]


def _micro_batch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """``TrainSchedule._step_to_micro_batch``: the micro-batch of a step on a stage, and whether it runs forward."""
    if step % 2 == stage % 2:          # even step on an even stage, odd on odd: a forward
        return (step if step % 2 == 0 else step - 1) // 2 - stage // 2, True
    if step % 2 == 0:                  # even step, odd stage: a backward
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def stage_commands(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s commands in order: ``(kind, micro-batch)`` with kind one of ``F``, ``B``, ``recv_act``,
    ``send_grad``, ``send_act``, ``recv_grad``.

    >>> [k for k, _ in stage_commands(0, 2, 2)]       # the first of two stages
    ['F', 'send_act', 'F', 'send_act', 'recv_grad', 'B', 'recv_grad', 'B']
    >>> [k for k, _ in stage_commands(1, 2, 2)]       # the last
    ['recv_act', 'F', 'B', 'recv_act', 'send_grad', 'F', 'B', 'send_grad']
    """
    out, prev = [], -1
    valid = range(micro_batches).__contains__
    for step in range(2 * (micro_batches + stages - 1)):
        mb, forward = _micro_batch(step, stage, stages)
        if forward and stage > 0:
            out += [("recv_act", mb)] * valid(mb) + [("send_grad", prev)] * valid(prev)
        if not forward and stage < stages - 1:
            out += [("send_act", prev)] * valid(prev) + [("recv_grad", mb)] * valid(mb)
        if valid(mb):
            out.append(("F" if forward else "B", mb))
        prev = mb
    return out


def _pair(kind: str, stage: int, mb: int) -> tuple:
    """The transfer a send or receive takes part in: (tensor, sending stage, micro-batch)."""
    sender = {"send_act": stage, "recv_act": stage - 1, "send_grad": stage, "recv_grad": stage + 1}[kind]
    return ("act" if kind.endswith("act") else "grad", sender, mb)


def play(stages: int, micro_batches: int, forward_s: float, backward_s: float, send_s: float,
         blocking: bool = True) -> float:
    """The makespan of one step of the schedule [s] (see the module docstring).

    >>> play(4, 8, 1.0, 2.0, 0.0)      # free sends: 1F1B's (m + pp - 1)(F + B)
    33.0
    """
    prog = [stage_commands(s, stages, micro_batches) for s in range(stages)]
    pc, t = [0] * stages, [0.0] * stages
    waiting: dict[tuple, tuple] = {}     # a transfer one side has reached: (stage or "sent", time)
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while pc[s] < len(prog[s]):
                kind, mb = prog[s][pc[s]]
                if kind in ("F", "B"):
                    t[s] += forward_s if kind == "F" else backward_s
                elif not blocking and kind.startswith("send"):
                    key = _pair(kind, s, mb)
                    if key in waiting:                      # the receiver is there: it gets the data
                        other, since = waiting.pop(key)
                        t[other] = max(since, t[s]) + send_s
                        pc[other] += 1
                    else:
                        waiting[key] = ("sent", t[s])
                else:
                    key = _pair(kind, s, mb)
                    if key not in waiting or waiting[key][0] == s:   # the other side has not come yet
                        waiting.setdefault(key, (s, t[s]))
                        break
                    other, since = waiting.pop(key)
                    if other == "sent":                     # posted earlier, asynchronously
                        t[s] = max(t[s], since + send_s)
                    else:                                   # both sides held for the transfer
                        t[s] = t[other] = max(t[s], since) + send_s
                        pc[other] += 1
                pc[s] += 1
                moved = True
    if any(pc[s] < len(prog[s]) for s in range(stages)):
        raise RuntimeError("the schedule deadlocked")
    return max(t)
