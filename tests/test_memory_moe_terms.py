"""The mixture-of-experts terms of the Hugging Face step, by hand arithmetic."""

import json
from pathlib import Path

import gpumodel as gm
from gpumodel.core.activations import Attention, layer_activation_bytes
from gpumodel.core.autograd_tape import Graph, Tape
from gpumodel.core.hf_memory import hf_moments
from gpumodel.core.memory import CUBLAS_WORKSPACE_BYTES
from gpumodel.core.memory_parts import dense_mlp_width, largest_layer_tensor
from gpumodel.core.moe_backward import routed_backward_bytes, routing_bytes
from gpumodel.core.step_graph import ModelTensors, StepGraph, StepShape
from gpumodel.records.transformer import TransformerConfig
from gpumodel.vocabulary import Checkpointing, Optimizer, precision

QWEN_MOE = dict(model_type="qwen2_moe", hidden_size=2048, num_hidden_layers=2, num_attention_heads=16,
                num_key_value_heads=16, intermediate_size=5632, moe_intermediate_size=1408,
                shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4, vocab_size=151936,
                tie_word_embeddings=False)


def _moments(cfg, micro_batches):
    moments, _, _ = hf_moments(cfg, 1, 1024, precision("bf16"), Optimizer.ADAMW, Attention.SDPA, Checkpointing.NONE,
                               use_cache=False, keep_outputs=False, micro_batches=micro_batches, state_bytes=2,
                               foreach=False, fused=True, zero=0, dp=1, tp=1, pp=1)
    return moments


def test_largest_layer_tensor_is_the_fused_expert_gate_up():
    cfg = TransformerConfig.from_hf(QWEN_MOE)
    assert largest_layer_tensor(cfg) == 60 * 2 * 1408 * 2048     # E x 2I x h


def test_accumulation_adds_the_new_gate_up_gradient_when_the_down_one_is_gone():
    cfg = TransformerConfig.from_hf(QWEN_MOE)
    one, acc = _moments(cfg, 1), _moments(cfg, 2)
    tk = 4 * 1024                                                 # routed copies of 1 x 1024 tokens
    down, gate_up = 60 * 2048 * 1408 * 2, 60 * 2 * 1408 * 2048 * 2   # bf16 gradients of E x h x I, E x 2I x h
    # the gate-up grouped mm's backward: its new gradient, less what SiLU and the SiLU x up product saved (the
    # Tk x 2I gate-up output and the Tk x I SiLU output, gone by then; their Tk x 2I gradient came in their
    # place), plus the gradients of the layer's output and of the shared expert's output (T x h each, bf16)
    held = gate_up - 2 * tk * 1408 * 2 + 2 * 2048 * 1024 + 2 * 2048 * 1024
    for key in ("layer_backward", "backward_end"):
        assert float(acc[key]["backward_temporaries"]) == held
    # without accumulation the down projection's gradient, made just before, is the parameter's and stays
    assert float(one["layer_backward"]["backward_temporaries"]) == held + down


def test_embedding_gradient_comes_last():
    cfg = TransformerConfig.from_hf(QWEN_MOE)
    one, acc = _moments(cfg, 1), _moments(cfg, 2)
    embed = 151936 * 2048 * 2                                     # the input embedding's bf16 gradient
    # without accumulation the first layer's backward runs before the embedding's gradient exists
    assert float(one["embedding_backward"]["gradients"] - one["backward_end"]["gradients"]) == embed
    assert float(one["embedding_backward"]["backward_temporaries"]) == 0
    # with accumulation it is held, and the embedding's new gradient sits beside it
    assert float(acc["embedding_backward"]["gradients"] - acc["backward_end"]["gradients"]) == 0
    assert float(acc["embedding_backward"]["backward_temporaries"]) == embed


# ---- under autocast the routed experts run in fp32: torch._grouped_mm has no autocast rule, and transformers
# casts the routed tokens to the expert weights' dtype (fp32 master weights) before calling it
TINY_MIXTRAL = dict(model_type="mixtral", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=4, intermediate_size=96, vocab_size=256, num_local_experts=4,
                    num_experts_per_tok=2, tie_word_embeddings=False)


def _tiny(k=2):
    return TransformerConfig.from_hf({**TINY_MIXTRAL, "num_experts_per_tok": k})


def test_autocast_copies_no_routed_expert_weight():
    cfg = _tiny()
    h, E, V = 64, 4, 256
    moments, _, _ = hf_moments(cfg, 1, 32, precision("amp_bf16"), Optimizer.ADAMW, Attention.SDPA,
                               Checkpointing.NONE, use_cache=False, keep_outputs=False, micro_batches=1,
                               state_bytes=4, foreach=True, fused=False, zero=0, dp=1, tp=1, pp=1)
    attention = 4 * h * h                      # q, k, v, o (64 x 64 each)
    router = E * h
    # bf16 copies of the attention, router and LM-head weights; none of the experts' 4 x (2 x 96) x 64 and 4 x 64 x 96
    assert float(moments["forward_loss"]["autocast_weight_copies"]) == 2 * (attention + router) + 2 * V * h


def test_each_routed_copy_saves_fp32_expert_tensors_under_autocast():
    h, i, T = 64, 96, 32
    per_copy = {p: (float(layer_activation_bytes(_tiny(3), T, T, p)) - float(layer_activation_bytes(_tiny(2), T, T, p))) / T
                for p in ("bf16", "amp_bf16")}
    # gathered input, gate-up (2I), SiLU out (I), product (I), down out (h); three int64 indices
    assert per_copy["amp_bf16"] == 4 * h + 4 * 2 * i + 4 * i + 4 * i + 4 * h + 24     # fp32
    assert per_copy["bf16"] == 2 * h + 2 * 2 * i + 2 * i + 2 * i + 2 * h + 24


def _held_after_forward(cfg, b, s, prec):
    """Bytes the tensor-by-tensor step holds after its forward (loss kept, outputs dropped) over those before."""
    shape = StepShape(cfg, b, s, prec)
    tape = Tape()
    model = ModelTensors(tape, shape)
    start = len(tape.events)
    StepGraph(Graph(tape, tokens=shape.T), model, shape).forward()
    sizes, held = {}, 0
    for key, n in tape.events[start:]:
        if n:
            sizes[key] = n
            held += n
        else:
            held -= sizes.pop(key, 0)
    return held


def test_graph_routed_copy_is_fp32_under_autocast():
    h, i, T = 64, 96, 32
    per_copy = {p: (_held_after_forward(_tiny(3), 1, T, p) - _held_after_forward(_tiny(2), 1, T, p)) / T
                for p in ("bf16", "amp_bf16")}
    # gathered input, gate-up, SiLU out, product, down out, one int64 index
    assert per_copy["amp_bf16"] == 4 * (h + 2 * i + i + i + h) + 8
    assert per_copy["bf16"] == 2 * (h + 2 * i + i + i + h) + 8


def test_measured_mixtral_under_autocast():
    """The amp_bf16 Mixtral run of tests/data/memory (H200): held after the forward and the step's peak."""
    data = Path(__file__).parent / "data" / "memory"
    cfg = TransformerConfig.from_hf(json.loads((data / "families_shapes.json").read_text())["mixtral-100m"]["hf_config"])
    row = next(r for r in map(json.loads, (data / "families_runs.jsonl").read_text().splitlines())
               if r["shape"] == "mixtral-100m" and r["kind"] == "train" and r["precision"] == "amp_bf16")
    held = _held_after_forward(cfg, row["batch"], row["seq"], "amp_bf16")
    assert abs(held / (row["alloc_after_fwd"] - row["alloc_steady"]) - 1) < 0.005
    peak = gm.training_memory(cfg, row["batch"], row["seq"], precision="amp_bf16", optimizer="adamw").peak_bytes
    assert abs((peak - CUBLAS_WORKSPACE_BYTES) / row["peak_bytes"] - 1) < 0.005


def test_fp32_experts_run_whole_token_gemms():
    """60 experts, 4 a token: 4,096 tokens give 273.07 assignments an expert. Under autocast with fp32 weights each
    expert runs one mm of a whole number of rows, and the step is priced (it raised on the fractional rows)."""
    import warnings
    from gpumodel.training.moe import _whole_tokens, expert_tokens
    cfg = TransformerConfig.from_hf(QWEN_MOE)
    whole = _whole_tokens(expert_tokens(cfg, 4096))
    assert sum(whole) == 4096 * 4 and set(whole) == {273, 274}     # 16,384 = 60 x 273 + 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.DoesNotFitWarning)
        st = gm.training_step_time(cfg, "h100-sxm", batch_size=2, seq_len=2048, precision="amp_bf16")
    assert st.seconds > 0


# ---- the routed experts' backward (gpumodel.core.moe_backward) and the checkpointed Mixtral runs it decides
MOE = Path(__file__).parent / "data" / "memory" / "moe"
H, I, E = 4096, 14336, 8                                          # Mixtral-8x7B's layer, 2 experts a token
GiB = 2**30


def test_routed_backward_moments_by_hand():
    cfg = gm.model("mixtral-8x7b")
    bf16 = precision("bf16")
    tk = 2 * 8192
    product = 3 * tk * H * 4                          # incoming gradient and both of the product's, fp32
    down = tk * I * 2 + E * H * I * 2                 # the Tk x I input gradient, the new E x h x I gradient
    silu_up = 2 * tk * I * 2 - tk * H * 2             # two Tk x I gradients; the Tk x h down output is gone
    gate_up = 2 * E * I * H * 2 - 2 * tk * I * 2      # the new E x 2I x h gradient; gate-up and SiLU outputs gone
    assert (product, down, silu_up, gate_up) == (805306368, 1409286144, 805306368, 939524096)
    assert float(routed_backward_bytes(cfg, 8192, bf16, new_gradients=True)) == down            # 1.3125 GiB
    # four times the tokens: the fp32 routing product, 3 x 65,536 x 4,096 x 4 B = 3 GiB, beats the down projection
    assert float(routed_backward_bytes(cfg, 32768, bf16, new_gradients=True)) == 3 * GiB
    # saved by the forward (not recomputed), the product's saved tensors stay while the down output's gradient is
    # cast to bf16: 65,536 x 4,096 x 2 B more
    assert float(routed_backward_bytes(cfg, 32768, bf16, new_gradients=True, recomputed=False)) == 3.5 * GiB
    # without accumulation the down gradient stays: the gate-up projection's moment is the larger
    assert float(routed_backward_bytes(cfg, 8192, bf16, new_gradients=True, kept_gradients=True)) == (
        gate_up + E * H * I * 2)


def test_mixtral_routing_weights_stay_fp32():
    bf16 = precision("bf16")
    assert routing_bytes(gm.model("mixtral-8x7b"), bf16) == 4
    assert routing_bytes(TransformerConfig.from_hf(QWEN_MOE), bf16) == 2
    qwen = TransformerConfig.from_hf(QWEN_MOE)
    # Qwen2-MoE: a bf16 product (3 x Tk x h x 2) and the shared expert's output gradient (T x h x 2)
    tk = 4 * 64
    assert float(routed_backward_bytes(qwen, 64, bf16, new_gradients=False)) == max(
        3 * tk * 2048 * 2, tk * 1408 * 2) + 64 * 2048 * 2


def test_the_gate_up_gradient_leaves_the_dense_transient():
    cfg = gm.model("mixtral-8x7b")
    assert dense_mlp_width(cfg) == 0                                   # no dense MLP in a Mixtral layer
    assert largest_layer_tensor(cfg, experts=False) == H * H           # q_proj
    assert dense_mlp_width(TransformerConfig.from_hf(QWEN_MOE)) == 5632   # the shared expert


def _moe_run(shape, prec, optimizer, batch, seq, accum):
    rows = [json.loads(line) for line in (MOE / "runs.jsonl").read_text().splitlines() if line.strip()]
    return next(r for r in rows if (r["shape"], r["precision"], r["optimizer"], r["checkpointing"], r["batch"],
                                    r["seq"], r["gradient_accumulation_steps"], r.get("repeat", False))
                == (shape, prec, optimizer, True, batch, seq, accum, False))


def _moe_cfg(shape):
    return TransformerConfig.from_hf(json.loads((MOE / "shapes.json").read_text())[shape])


def test_checkpointed_mixtral_layer_backward_by_hand():
    """mixtral-2l, bf16, SGD, checkpointing, 4 x 2048 tokens, 2 micro-batches: the down projection's backward."""
    cfg, T = _moe_cfg("mixtral-2l"), 4 * 2048
    moments, _, _ = hf_moments(cfg, 4, 2048, precision("bf16"), Optimizer.SGD, Attention.SDPA, Checkpointing.FULL,
                               use_cache=True, keep_outputs=False, micro_batches=2, state_bytes=0, foreach=True,
                               fused=False, zero=0, dp=1, tp=1, pp=1)
    held = moments["layer_backward"]
    # the layer output's gradient (T x h, bf16), the down projection's input gradient (2T x I) and new gradient
    assert float(held["backward_temporaries"]) == 2 * T * H + 2 * T * I * 2 + E * H * I * 2
    one = float(layer_activation_bytes(cfg, T, 2048, "bf16", "sdpa"))
    # two checkpoints (T x h, bf16), the token ids and the bf16 RoPE tables, the recomputed layer
    assert float(held["activations"]) == 2 * T * H * 2 + 8 * T + 2 * 2048 * 128 * 2 + one
    # no loss buffers, final norm or LM-head input any more
    run = _moe_run("mixtral-2l", "bf16", "sgd", 4, 2048, 2)
    peak = gm.training_memory(cfg, 4, 2048, precision="bf16", optimizer="sgd", checkpointing=True,
                              gradient_accumulation_steps=2)
    assert peak.peak_moment == "layer_backward"
    assert abs(peak.peak_bytes / run["phases"]["backward2"]["peak"] - 1) < 0.0005


def test_measured_checkpointed_mixtral_with_accumulation():
    """The four checkpointed Mixtral runs of tests/data/memory/moe whose peak is a layer's backward (H100)."""
    for shape, prec, optimizer, batch, seq, accum in (("mixtral-4l", "bf16", "adamw", 4, 4096, 2),
                                                      ("mixtral-2l", "amp_bf16", "adamw", 4, 2048, 2),
                                                      ("mixtral-2l", "bf16", "sgd", 8, 4096, 4),
                                                      ("mixtral-2l", "bf16", "sgd", 4, 2048, 2)):
        run = _moe_run(shape, prec, optimizer, batch, seq, accum)
        m = gm.training_memory(_moe_cfg(shape), batch, seq, precision=prec, optimizer=optimizer, checkpointing=True,
                               gradient_accumulation_steps=accum, fused=run["fused"])
        assert abs(m.peak_bytes / run["peak_allocated"] - 1) < 0.001, (shape, prec, optimizer, batch, seq, accum)
