import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _isolated_user_specs(monkeypatch):
    """Tests never see a developer's own GPUMODEL_SPEC_PATH."""
    monkeypatch.delenv("GPUMODEL_SPEC_PATH", raising=False)
