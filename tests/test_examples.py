"""Every notebook under examples/ runs top to bottom on a CPU-only machine, without errors."""

import re
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
    warned = [o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "stream" and o.name == "stderr" and "Warning" in o.text]
    assert warned == [], "the notebook runs without warnings (a deprecated name, a run that does not fit)"


def test_examples_do_not_reimplement_or_patch_paths():
    for path in EXAMPLES:
        text = path.read_text(encoding="utf-8")
        assert "sys.path" not in text, f"{path.name} must use the installed package"


#: a call that draws a chart: the library's plotting functions, or a matplotlib figure of the cell's own
_DRAWS = re.compile(r"\bplot_\w+\(|\bgm\.plot\.\w+\(|\bplt\.subplots\(")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_saved_outputs_are_real(path):
    """The outputs saved with a notebook are what it shows when run: each cell that draws a chart saves its image,
    and no cell saved a warning (an API the notebook should not use, or a run that went wrong)."""
    nb = nbformat.read(path, as_version=4)
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    missing = [i for i, c in code if _DRAWS.search(c.source)
               and not any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert missing == [], f"cells {missing} draw a chart but saved no image: run the notebook with the inline backend"
    warned = [i for i, c in code for o in c.get("outputs", [])
              if o.get("output_type") == "stream" and o.get("name") == "stderr" and "Warning" in o.get("text", "")]
    assert warned == [], f"cells {warned} saved a warning"
