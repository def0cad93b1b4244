"""Calibration records: YAML round trip, atomic save, validation errors that name file and field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.calibration.model import default_parameters
from gpumodel.calibration.record import Calibration, MeasuredPoint, load_calibration
from gpumodel.records.specs import SpecError


def _record(**over) -> Calibration:
    g = gm.gpu("h100")
    fields = dict(gpu="h100-sxm", device_name="NVIDIA H100 80GB HBM3", sm_count=132, date="2026-01-01T00:00:00Z",
                  torch_version="2.11.0", parameters=default_parameters(g),
                  points=[MeasuredPoint(op="matmul", kernel="mm", dtype="bf16", shape={"m": 8.0, "n": 8.0, "k": 8.0},
                                        time_s=5e-6)])
    fields.update(over)
    return Calibration(**fields)


def test_round_trip(tmp_path):
    cal = _record()
    path = cal.save(tmp_path / "cal.yaml")
    back = load_calibration(path)
    assert back == cal
    assert back.model().params["launch_s"] == pytest.approx(cal.parameters["launch_s"])
    assert back.points[0].shape["m"] == 8.0


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "cal.yaml"
    _record().save(path)
    before = path.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        _record(device_name="other").save(path)
    assert path.read_text() == before            # old file intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.yaml"]   # temp file removed


def test_retired_parameters_load_dropped():
    """Records fitted before the generic kernel's chain and the softmax residency keep loading: their fixed
    ``strided_launch_s`` and fitted ``rows_per_sm_softmax`` are dropped, the mechanisms that replaced them priced."""
    old = _record(parameters={**default_parameters(gm.gpu("h100")), "strided_launch_s": 1.5e-6,
                              "rows_per_sm_softmax": 54.5})
    assert "strided_launch_s" not in old.parameters and "rows_per_sm_softmax" not in old.parameters
    p = old.model().params
    assert p["strided_step_s"] > 0 and "rows_per_sm_softmax" not in p


def test_unknown_parameter_is_an_error_naming_file_and_field(tmp_path):
    path = _record().save(tmp_path / "cal.yaml")
    path.write_text(path.read_text().replace("launch_s:", "lunch_s:", 1))
    with pytest.raises(SpecError, match=r"cal\.yaml.*parameters.*lunch_s"):
        load_calibration(path)


def test_unknown_field_and_bad_value(tmp_path):
    path = _record().save(tmp_path / "cal.yaml")
    text = path.read_text()
    path.write_text(text.replace("sm_count: 132", "sm_count: 0"))
    with pytest.raises(SpecError, match="sm_count"):
        load_calibration(path)
    path.write_text("colour: blue\n" + text)
    with pytest.raises(SpecError, match="colour"):
        load_calibration(path)


def test_missing_file():
    with pytest.raises(SpecError, match="no such calibration file"):
        load_calibration(Path("does-not-exist.yaml"))


def test_negative_parameter_rejected():
    with pytest.raises(ValueError, match="bandwidth"):
        _record(parameters={**default_parameters(gm.gpu("h100")), "bandwidth": -1.0})


def test_efficiencies_are_fractions_of_the_datasheet():
    eff = _record().efficiencies()
    assert eff["flops_bf16"] == pytest.approx(0.72)       # DEFAULT_EFFICIENCY["flops"]
    assert eff["bandwidth"] == pytest.approx(0.87)


@pytest.mark.parametrize("name, value, hint", [
    ("bandwidth", 3.35, "3.35e12"),       # TB/s written without its unit: times would come out in years
    ("flops_bf16", 989.0, "9.89e14"),     # TFLOP/s written without its unit
    ("launch_s", 4.0, "4e-06"),           # microseconds written as seconds
])
def test_a_value_in_the_wrong_unit_is_refused_with_the_si_form(tmp_path, name, value, hint):
    path = _record().save(tmp_path / "cal.yaml")
    import yaml

    data = yaml.safe_load(path.read_text())
    data["parameters"][name] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=rf"cal\.yaml.*{name}.*{hint}"):
        load_calibration(path)


def test_the_shipped_calibration_is_plausible():
    from gpumodel.calibration.record import calibration_for

    assert calibration_for("h200").parameters["bandwidth"] > 1e12   # 4.8 TB/s datasheet, about 4 TB/s fitted
