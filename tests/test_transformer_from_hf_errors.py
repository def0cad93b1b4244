"""``TransformerConfig.from_hf`` called directly: every bad config ends in a typed error naming what is wrong."""

import pytest

from gpumodel.base.errors import ArgumentTypeError, GpumodelError
from gpumodel.records.transformer import HFConfigError, TransformerConfig

BASE = dict(model_type="llama", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, vocab_size=100)


def test_a_good_config_reads():
    cfg = TransformerConfig.from_hf(BASE)
    assert (cfg.hidden_size, cfg.num_layers, cfg.head_dim) == (64, 2, 16)  # 64 / 4 heads


@pytest.mark.parametrize("bad, words", [
    (dict(BASE, num_hidden_layers=-1), "num_layers"),
    (dict(BASE, hidden_size=0), "hidden_size"),
    (dict(BASE, model_type="bert"), "model_type"),
    ({k: v for k, v in BASE.items() if k != "vocab_size"}, "vocab_size"),
    (dict(BASE, intermediate_size=[128]), "intermediate_size"),
    (dict(BASE, hidden_size="sixty-four"), "wrong kind|hidden_size"),
])
def test_bad_values_are_hf_config_errors(bad, words):
    with pytest.raises(HFConfigError, match=words):
        TransformerConfig.from_hf(bad)


def test_bad_paths_are_hf_config_errors(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{bad")
    for path, words in [(tmp_path / "missing.json", "cannot read"), (tmp_path / "list.json", "JSON list"),
                        (tmp_path / "broken.json", "not JSON")]:
        with pytest.raises(HFConfigError, match=words):
            TransformerConfig.from_hf(path)


def test_a_config_of_no_accepted_kind_is_a_type_error():
    with pytest.raises(ArgumentTypeError, match="config must be"):
        TransformerConfig.from_hf(5)
    assert issubclass(HFConfigError, GpumodelError)


def _llama_3_8b_hf() -> dict:
    """The Hugging Face config.json of the Llama-3-8B preset (specs/models/llama-3-8b.yaml)."""
    import gpumodel as gm

    cfg = gm.model("llama-3-8b")
    return dict(model_type="llama", hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
                intermediate_size=cfg.intermediate_size, vocab_size=cfg.vocab_size,
                max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=False,
                attention_bias=False, mlp_bias=False)


def test_the_llama_3_8b_config_reads_with_json_booleans():
    assert TransformerConfig.from_hf(_llama_3_8b_hf()).num_parameters() == 8_030_261_248


@pytest.mark.parametrize("key", ["tie_word_embeddings", "attention_bias", "mlp_bias"])
@pytest.mark.parametrize("value", ["false", "true", "False", 0, 1, 0.0, "no"])
def test_a_boolean_key_given_as_text_or_a_number_is_refused(key, value):
    # bool("false") is True: read as given, "false" would drop the untied LM head (7,504,924,672 parameters)
    with pytest.raises(HFConfigError, match=r"true or false \(a JSON boolean\)") as info:
        TransformerConfig.from_hf(dict(_llama_3_8b_hf(), **{key: value}))
    assert key in str(info.value) and repr(value) in str(info.value)
    assert (info.value.argument, info.value.value, info.value.allowed) == (key, value, "true or false (a JSON boolean)")


@pytest.mark.parametrize("config, key", [
    (dict(model_type="qwen2_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
          vocab_size=100, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, qkv_bias="true"), "qkv_bias"),
    (dict(model_type="starcoder2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
          vocab_size=100, use_bias="yes"), "use_bias"),
    (dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
          vocab_size=100, use_parallel_residual=1), "use_parallel_residual"),
    (dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=128,
          tie_word_embeddings="false"), "tie_word_embeddings"),
])
def test_every_family_refuses_a_boolean_key_of_the_wrong_kind(config, key):
    with pytest.raises(HFConfigError, match=f"{key} must be true or false"):
        TransformerConfig.from_hf(config)


def test_json_booleans_still_read_both_ways():
    tied = TransformerConfig.from_hf(dict(_llama_3_8b_hf(), tie_word_embeddings=True))
    assert tied.tie_word_embeddings and tied.num_parameters() == 7_504_924_672
    assert TransformerConfig.from_hf(dict(_llama_3_8b_hf(), tie_word_embeddings=None)).tie_word_embeddings is False


@pytest.mark.parametrize("key, value, words", [
    ("vocab_size", 1e30, r"vocab_size = 1e\+30 is out of range; allowed: a whole number in 1\.\.2147483647"),
    ("vocab_size", 2**31, "vocab_size = 2147483648 is out of range"),
    ("vocab_size", 128256.5, "vocab_size must be a whole number in 1..2147483647"),
    ("vocab_size", float("nan"), "vocab_size must be a whole number"),
    ("vocab_size", float("inf"), "vocab_size must be a whole number"),
    ("hidden_size", 2**70, "hidden_size = 1180591620717411303424 is out of range"),
    ("intermediate_size", 14336.25, "intermediate_size must be a whole number"),
    ("max_position_embeddings", 1e12, "max_position_embeddings = 1000000000000.0 is out of range"),
])
def test_a_size_that_is_no_whole_number_or_absurdly_large_is_refused_clearly(key, value, words):
    with pytest.raises(HFConfigError, match=words) as info:
        TransformerConfig.from_hf(dict(_llama_3_8b_hf(), **{key: value}))
    assert "Unable to parse" not in str(info.value) and "Input should be" not in str(info.value)
    assert info.value.argument == key and info.value.allowed.startswith("a whole number in 1..")


def test_a_whole_float_size_still_reads():
    assert TransformerConfig.from_hf(dict(_llama_3_8b_hf(), vocab_size=128256.0)).vocab_size == 128256


def test_sizes_built_in_code_are_checked_the_same_way():
    from gpumodel.base.errors import RecordError

    base = dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, vocab_size=100)
    with pytest.raises(RecordError, match=r"vocab_size = 1e\+30 is out of range") as info:
        TransformerConfig(**dict(base, vocab_size=1e30))
    assert (info.value.argument, info.value.value) == ("vocab_size", 1e30)
    with pytest.raises(RecordError, match="num_experts must be a whole number in 0..2147483647"):
        TransformerConfig(**dict(base, num_experts=2.5))
    with pytest.raises(RecordError, match="num_heads must be a whole number") as info:
        TransformerConfig(**dict(base, num_heads=True))
    assert "num_kv_heads" not in str(info.value)  # no second error about a default made from the bad value
