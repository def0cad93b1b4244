import pytest

import gpumodel as gm


def test_compare_columns_are_the_records_numbers():
    table = gm.compare(["h100"])
    h100 = gm.gpu("h100")
    assert table["memory_gb"] == [80.0]  # datasheet 80 GB
    assert table["bandwidth_tbs"] == [3.35]
    assert table["bf16_tflops"] == [pytest.approx(h100.peak_flops("bf16") / 1e12, abs=0.05)]
    assert table["ridge_bf16"] == [pytest.approx(295.3, abs=0.05)]  # 989.4 / 3.35


def test_compare_reprs_carry_every_gpu():
    table = gm.compare()
    text, html = repr(table), table._repr_html_()
    for name in gm.list_gpus():
        assert name in text and name in html
    assert html.startswith("<table>")


def test_compare_rejects_unknown_column_and_gpu():
    with pytest.raises(ValueError, match="unknown column 'speed'"):
        gm.compare(["h100"], columns=["speed"])
    with pytest.raises(gm.UnknownGPUError, match="did you mean"):
        gm.compare(["h10"])
