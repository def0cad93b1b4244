"""Every notebook under examples/ runs top to bottom on a CPU-only machine, without errors."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is in the test extra")
nbclient = pytest.importorskip("nbclient", reason="nbclient is in the test extra")

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.ipynb"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    saved = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.get("outputs") for c in saved), "outputs are saved in the notebook"
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []


def test_examples_do_not_reimplement_or_patch_paths():
    for path in EXAMPLES:
        text = path.read_text(encoding="utf-8")
        assert "sys.path" not in text, f"{path.name} must use the installed package"
