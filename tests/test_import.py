"""``import gpumodel`` is light: no file reads, no optional dependencies, fast."""

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True).stdout.strip()


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
        heavy = [m for m in ("torch", "matplotlib", "yaml", "scipy") if m in sys.modules]
        print(heavy, [f for f in opened if f.endswith((".yaml", ".yml"))])
    """)
    assert out == "[] []"


def test_import_time_is_small():
    # numpy and pydantic are paid for first; the budget is 0.3 s on top of them
    out = _run("""
        import time, numpy, pydantic
        t = time.perf_counter(); import gpumodel; import gpumodel.hardware, gpumodel.gpus
        print(time.perf_counter() - t)
    """)
    assert float(out) < 0.3


def test_all_names_resolve():
    import gpumodel as gm

    missing = []
    for name in gm.__all__:
        try:
            getattr(gm, name)
        except (AttributeError, ImportError) as exc:
            missing.append(f"{name}: {exc}")
    assert missing == []
