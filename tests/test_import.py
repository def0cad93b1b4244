"""``import gpumodel`` is light: no file reads, no optional dependencies, fast."""

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True).stdout.strip()


#: optional or heavy packages the core never imports (torch for calibration, matplotlib for plots, pandas for
#: ``to_pandas()``; scipy is not used at all)
HEAVY = ("torch", "matplotlib", "scipy", "pandas")


def test_import_pulls_in_no_optional_dependency_and_reads_no_spec():
    out = _run("""
        import builtins, sys
        opened = []
        real_open = builtins.open
        def spy(file, *a, **k):
            opened.append(str(file)); return real_open(file, *a, **k)
        builtins.open = spy
        import gpumodel
        builtins.open = real_open
        heavy = [m for m in ("torch", "matplotlib", "pandas", "yaml", "scipy") if m in sys.modules]
        print(heavy, [f for f in opened if f.endswith((".yaml", ".yml"))])
    """)
    assert out == "[] []"


def test_using_the_core_pulls_in_no_heavy_module():
    # what makes an import slow is a heavy dependency; this is checked by name, not by a clock
    out = _run(f"""
        import sys, gpumodel as gm
        import gpumodel.records.gpu, gpumodel.vocabulary.gpus
        op = gm.ops.matmul(4096, 4096, 4096)
        gm.roofline(op, "h100"); gm.estimate_time(op, "h100"); gm.training_memory("llama-3-8b", 1, 1024)
        gm.occupancy("h100", threads_per_block=256, registers_per_thread=64)
        print([m for m in {HEAVY!r} if m in sys.modules])
    """)
    assert out == "[]"


def test_import_loads_no_submodule():
    # what makes the import light, counted rather than timed: nothing of the package but its __init__ runs
    out = _run("""
        import sys, gpumodel
        print(sorted(m for m in sys.modules if m.startswith("gpumodel")))
    """)
    assert out == "['gpumodel']"


def test_import_time_is_small():
    # numpy and pydantic are paid for first; the budget is 0.3 s on top of them for the package and the
    # GPU records' module. It is the child's CPU time (time.process_time), which other processes on a busy
    # machine do not inflate as they do wall time (0.347 s once against this budget), and the best of five
    # fresh interpreters counts. A heavy import would cost far more (torch: seconds).
    code = """
        import time, numpy, pydantic
        t = time.process_time(); import gpumodel; import gpumodel.records.gpu, gpumodel.vocabulary.gpus
        print(time.process_time() - t)
    """
    assert min(float(_run(code)) for _ in range(5)) < 0.3


def test_all_names_resolve():
    import gpumodel as gm

    missing = []
    for name in gm.__all__:
        try:
            getattr(gm, name)
        except (AttributeError, ImportError) as exc:
            missing.append(f"{name}: {exc}")
    assert missing == []
