"""Which AdamW implementation a Hugging Face model gets by default, and what each allocates in its step.

``torch.optim.AdamW`` picks its implementation when ``foreach`` is not given (for-loop, foreach or fused);
the foreach one allocates ``sqrt(v)`` for all parameters at once. This prints, for a model built from its
config in bf16 as ``bench/measure_edge.py`` builds it, and for one built in fp32 then cast as
``bench/measure_memory.py`` builds it: the parameters' types, what ``_default_to_fused_or_foreach``
answers, and the peak allocated during ``opt.step()`` over the steady state for foreach=None (the
default), True, False and fused=True.

Usage (GPU)::

    python bench/probe_optimizer.py [--shape llama-3.2-1b]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from measure_edge import SHAPES, build  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama-3.2-1b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--builds", default="bf16,fp32", help="which builds: bf16 (from_config in bf16), fp32 (then cast)")
    args = ap.parse_args(argv)
    import torch
    from torch.optim.optimizer import _default_to_fused_or_foreach

    src = inspect.getsource(torch.optim.adamw) if hasattr(torch.optim, "adamw") else ""
    print("torch", torch.__version__, "| lines of torch.optim.adamw mentioning sqrt:")
    for line in src.splitlines():
        if "sqrt" in line and "foreach" in line:
            print("   ", line.strip())
    rows = []
    builds = {"bf16": "bf16 from_config", "fp32": "fp32 from_config, then .to(bf16)"}
    for how in [builds[b] for b in args.builds.split(",")]:
        for kind in ("default", "foreach", "forloop", "fused"):
            if how.startswith("bf16"):
                model, cfg = build(SHAPES[args.shape], torch.bfloat16, "cuda", torch)
            else:
                model, cfg = build(SHAPES[args.shape], torch.float32, "cuda", torch)
                model = model.to(torch.bfloat16)
            if args.checkpointing:
                model.gradient_checkpointing_enable()
            model.train()
            params = list(model.parameters())
            types = sorted({type(p).__name__ for p in params})
            default = _default_to_fused_or_foreach(params, False, False)
            opts = {"default": {}, "foreach": {"foreach": True}, "forloop": {"foreach": False}, "fused": {"fused": True}}
            opt = torch.optim.AdamW(params, lr=1e-5, **opts[kind])
            x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")
            for _ in range(3):
                loss = model(input_ids=x, labels=x).loss
                loss.backward()
                loss = None
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                opt.step()
                torch.cuda.synchronize()
                step_peak = torch.cuda.max_memory_allocated() - before
                opt.zero_grad(set_to_none=True)
            param_bytes = sum(p.numel() * p.element_size() for p in params)
            row = dict(build=how, optimizer=kind, parameter_types=types, default_fused_foreach=list(default),
                       step_temporaries_over_parameters=round(step_peak / param_bytes, 3))
            rows.append(row)
            print(json.dumps(row), flush=True)
            model = opt = params = x = None
            gc.collect()
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
