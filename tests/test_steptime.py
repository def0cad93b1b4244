import pytest

import gpumodel as gm
from gpumodel.steptime import step_kernels


def test_step_kernels_count_matmuls_per_layer():
    # llama: q, k, v, o, gate, up, down = 7 forward matmuls per layer; backward two per forward matmul
    cfg = gm.model("llama-3.2-1b")
    phases = step_kernels(cfg, 2, 128, precision="bf16")
    fwd = sum(n for op, n in phases["forward"] if op.name == "matmul")
    bwd = sum(n for op, n in phases["backward"] if op.name == "matmul")
    assert fwd == 7 * cfg.num_layers + 1  # + LM head
    assert bwd == 2 * fwd


def test_forward_matmul_flops_are_2_n_t():
    # forward matmul FLOPs = 2 x (matmul weights) x tokens
    cfg = gm.model("llama-3.2-1b")
    b, s = 2, 256
    phases = step_kernels(cfg, b, s, precision="bf16")
    flops = sum(n * float(op.flops) for op, n in phases["forward"] if op.name == "matmul")
    weights = cfg.num_layers * cfg.layer_matmul_parameters() + cfg.vocab_size * cfg.hidden_size
    assert flops == pytest.approx(2 * weights * b * s, rel=1e-12)


def test_checkpointing_adds_a_forward_and_amp_adds_casts():
    plain = gm.training_step_time("gpt2", "h100", batch_size=4, seq_len=512, precision="bf16")
    ckpt = gm.training_step_time("gpt2", "h100", batch_size=4, seq_len=512, precision="bf16", checkpointing=True)
    assert ckpt.breakdown["recompute"] > 0 and plain.breakdown["recompute"] == 0
    assert ckpt.seconds > plain.seconds


def test_time_grows_with_batch_and_mfu_is_a_fraction():
    small = gm.training_step_time("llama-3.2-1b", "h200", batch_size=1, seq_len=1024)
    large = gm.training_step_time("llama-3.2-1b", "h200", batch_size=8, seq_len=1024)
    assert large.seconds > small.seconds
    assert 0 < small.mfu < large.mfu < 1
    assert large.tokens_per_s == pytest.approx(8 * 1024 / large.seconds)


def test_model_flops_follow_palm():
    cfg = gm.model("gpt2")
    st = gm.training_step_time(cfg, "h100", batch_size=2, seq_len=1024)
    tokens = 2 * 1024
    assert st.model_flops == pytest.approx(6 * cfg.num_parameters() * tokens + 12 * 12 * 768 * 1024 * tokens)


@pytest.mark.parametrize("kwargs, match", [
    ({"precision": "int8"}, "precision=.int8. is not one of"),
    ({"optimizer": "lion"}, "optimizer=.lion. is not one of"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
])
def test_bad_input(kwargs, match):
    args = {"batch_size": 1, "seq_len": 128} | kwargs
    with pytest.raises(gm.ArgumentError, match=match):
        gm.training_step_time("gpt2", "h100", **args)


def test_adamw_foreach_passes_move_80_bytes_per_fp32_parameter():
    # torch's foreach AdamW, 8 passes: reads 1+2+1+2+1+1+1+3 = 12 tensors, writes 8 -> 20 x 4 B = 80 B per parameter
    cfg = gm.model("gpt2")
    opt = step_kernels(cfg, 1, 128, precision="amp_bf16", optimizer="adamw")["optimizer"]
    total = sum(n * float(op.bytes) for op, n in opt)
    assert total == pytest.approx(80 * cfg.num_parameters())


def test_autocast_residual_add_reads_fp32_and_bf16():
    # amp: residual stream fp32 (4 B) + bf16 branch (2 B) read, fp32 written: 10 B per element
    from gpumodel.stepkernels import _layer
    cfg = gm.model("llama-3.2-1b")
    t = 2 * 64
    layer = _layer(cfg, 2, 64, "amp_bf16")
    last = layer.forward[-1]
    assert float(last.bytes) == pytest.approx(t * cfg.hidden_size * (4 + 2 + 4))


def test_gpt2_gelu_new_is_eight_unfused_kernels():
    from gpumodel.stepkernels import _layer
    cfg = gm.model("gpt2")
    layer = _layer(cfg, 1, 32, "bf16")
    mlp_width = [op for op in layer.forward if op.name == "elementwise" and float(op.shape["numel"]) == 32 * 3072]
    assert len(mlp_width) == 8
