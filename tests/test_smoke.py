import gpumodel as gm


def test_brenndoerfer_ridge_point_h100():
    # Brenndoerfer (2026): 989e12 / 3.35e12 ~ 295 FLOP/byte
    h100 = gm.gpu("h100")
    assert abs(h100.peak_flops("bf16") / h100.memory_bandwidth - 295.3) < 0.1
