"""The mixture-of-experts terms of the Hugging Face step, by hand arithmetic."""

from gpumodel.core.activations import Attention
from gpumodel.core.hf_memory import hf_moments
from gpumodel.core.memory_parts import largest_layer_tensor
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


def test_accumulation_adds_the_new_expert_gradient_and_embedding_comes_last():
    cfg = TransformerConfig.from_hf(QWEN_MOE)
    one, acc = _moments(cfg, 1), _moments(cfg, 2)
    new_grad = 60 * 2 * 1408 * 2048 * 2                           # bf16 gradient of the gate-up tensor
    for key in ("layer_backward", "backward_end"):
        assert float(acc[key]["backward_temporaries"] - one[key]["backward_temporaries"]) == new_grad
    embed = 151936 * 2048 * 2                                     # the input embedding's bf16 gradient
    # without accumulation the first layer's backward runs before the embedding's gradient exists
    assert float(one["embedding_backward"]["gradients"] - one["backward_end"]["gradients"]) == embed
    assert float(one["embedding_backward"]["backward_temporaries"]) == 0
    # with accumulation it is held, and the embedding's new gradient sits beside it
    assert float(acc["embedding_backward"]["gradients"] - acc["backward_end"]["gradients"]) == 0
    assert float(acc["embedding_backward"]["backward_temporaries"]) == embed
