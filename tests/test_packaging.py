"""The wheel ships the spec database inside the package, so an installed copy finds it from any directory."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"could not build a wheel here: {proc.stderr.strip()[-300:]}")
    return next(out.glob("gpumodel-*.whl"))


def test_wheel_carries_every_spec_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"gpumodel/specs/{p.relative_to(ROOT / 'specs').as_posix()}" for p in (ROOT / "specs").rglob("*.yaml")}
    assert shipped and shipped <= names
    assert "gpumodel/py.typed" in names


def test_wheel_declares_the_console_script_and_light_core(wheel):
    z = zipfile.ZipFile(wheel)
    meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    entry = z.read(next(n for n in z.namelist() if n.endswith("entry_points.txt"))).decode()
    assert "gpumodel = gpumodel.cli:main" in entry
    core = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert sorted(line.split()[1].split(">")[0].split("<")[0] for line in core) == ["numpy", "pydantic", "pyyaml"]
