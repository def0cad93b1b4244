"""TransformerConfig: HF import, exact parameter counts, presets, errors."""

import json

import pytest

import gpumodel as gm
from gpumodel.records.transformer import HFConfigError, TransformerConfig, UnknownModelError

# Published parameter counts (model cards / sum(p.numel()) of the HF models)
KNOWN = {
    "gpt2": 124_439_808,            # openai-community/gpt2
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,    # meta-llama/Llama-2-7b-hf
    "llama-3-8b": 8_030_261_248,    # meta-llama/Meta-Llama-3-8B
    "llama-3.2-1b": 1_235_814_400,  # meta-llama/Llama-3.2-1B
    "mistral-7b": 7_241_732_096,    # mistralai/Mistral-7B-v0.1
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
}


@pytest.mark.parametrize("name,count", sorted(KNOWN.items()))
def test_known_parameter_counts(name, count):
    assert gm.model(name).num_parameters() == count


def test_measured_parameter_counts_match_hf_models():
    """n_params recorded by bench/measure_memory.py from the HF models built on the GPU."""
    from pathlib import Path

    data = Path(__file__).parent / "data" / "memory"
    shapes = json.loads((data / "shapes.json").read_text())
    seen = {}
    for line in (data / "runs.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "n_params" in row:
            seen[row["shape"]] = row["n_params"]
    assert len(seen) == len(shapes)
    for name, n in seen.items():
        assert TransformerConfig.from_hf(shapes[name]["hf_config"]).num_parameters() == n, name


def test_brenndoerfer_layer_weights():
    # d_model=4096, d_ff=16384: 4*4096^2 + 2*4096*16384 = 201,326,592 params = 384 MiB in bf16
    cfg = TransformerConfig(hidden_size=4096, num_layers=32, num_heads=32, intermediate_size=16384,
                            vocab_size=32000, mlp="plain", norm="layernorm", position="learned")
    assert cfg.layer_matmul_parameters() == 4 * 4096**2 + 2 * 4096 * 16384 == 201_326_592
    assert cfg.layer_matmul_parameters() * 2 == 384 * 2**20
    assert 32 * cfg.layer_matmul_parameters() * 2 == 12 * 2**30
    # with bf16 grads and fp32 Adam moments: (2 + 2 + 8) bytes/param = 6x the bf16 weights = 72 GiB
    assert 32 * cfg.layer_matmul_parameters() * (2 + 2 + 8) == 72 * 2**30


def test_gqa_and_head_dim():
    cfg = gm.model("llama-3-8b")
    assert cfg.kv_dim == 8 * 128 and cfg.q_dim == 4096
    assert gm.model("llama-3.2-1b").head_dim == 64


def test_moe_active_parameters():
    m = gm.model("mixtral-8x7b")
    # 2 of 8 experts: published ~12.9B active
    assert 12.8e9 < m.active_parameters() < 13.0e9


def test_from_hf_families():
    for mtype in ("llama", "mistral", "qwen2", "gemma", "phi3"):
        cfg = TransformerConfig.from_hf(dict(model_type=mtype, hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=128, vocab_size=100))
        assert cfg.family == mtype and cfg.num_parameters() > 0
    neox = TransformerConfig.from_hf(dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=256, vocab_size=100))
    assert neox.norm.value == "layernorm" and neox.parallel_residual


def test_from_hf_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                                "vocab_size": 50257, "n_positions": 1024}))
    assert TransformerConfig.from_hf(str(path)).num_parameters() == 124_439_808


def test_from_hf_errors():
    with pytest.raises(HFConfigError, match="intermediate_size"):
        TransformerConfig.from_hf(dict(model_type="llama", hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, vocab_size=100))
    with pytest.raises(HFConfigError, match="unsupported model_type 't5'"):
        TransformerConfig.from_hf({"model_type": "t5"})
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        TransformerConfig(hidden_size=64, num_layers=1, num_heads=6, num_kv_heads=4, intermediate_size=8, vocab_size=8)


def test_catalog():
    names = gm.list_models()
    for required in ("gpt2", "llama-2-70b", "llama-3-405b", "llama-3.2-3b", "qwen2.5-72b", "mixtral-8x7b"):
        assert required in names
    assert gm.model("Llama3-8B") is gm.model("llama-3-8b")
    with pytest.raises(UnknownModelError, match="llama"):
        gm.model("llama-9")
    for name in names:
        assert gm.model(name).source.startswith("https://huggingface.co/")


def test_frozen():
    with pytest.raises(Exception):
        gm.model("gpt2").hidden_size = 1


def test_matches_transformers_when_installed():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for d in (dict(model_type="qwen2", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=96, vocab_size=300, tie_word_embeddings=True),
              dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   intermediate_size=256, vocab_size=300),
              dict(model_type="phi3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=4, intermediate_size=96, vocab_size=32064)):
        cfg = transformers.AutoConfig.for_model(**d)
        with torch.device("meta"):
            hf = transformers.AutoModelForCausalLM.from_config(cfg)
        assert TransformerConfig.from_hf(cfg).num_parameters() == sum(p.numel() for p in hf.parameters())


def test_former_attribute_names_warn_and_still_answer():
    cfg = gm.model("llama-3.2-1b")        # 32 heads, 8 key/value heads, head_dim 2048 / 32 = 64
    with pytest.warns(DeprecationWarning, match="num_kv_heads"):
        assert cfg.kv_heads == cfg.num_kv_heads == 8
    with pytest.warns(DeprecationWarning, match="head_dim"):
        assert cfg.dim_head == cfg.head_dim == 64


@pytest.mark.parametrize("kind, canonical, former", [
    ("MLPType", "GATED", "gated"), ("MLPType", "PLAIN", "plain"), ("NormType", "RMSNORM", "rmsnorm"),
    ("NormType", "LAYERNORM", "layernorm"), ("PositionType", "ROPE", "rope"), ("PositionType", "LEARNED", "learned"),
    ("PositionType", "ALIBI", "alibi"),
])
def test_enum_members_are_upper_case_with_the_former_names_as_aliases(kind, canonical, former):
    import gpumodel.records.transformer as tr

    enum_ = getattr(tr, kind)
    member = getattr(enum_, canonical)
    assert member.name == canonical and member.value == former       # the value users type is unchanged
    assert getattr(enum_, former) is member and enum_(former) is member
    assert [m.name for m in enum_] == [m.name.upper() for m in enum_]  # iteration gives the canonical names only


def test_records_carry_the_canonical_members():
    cfg = gm.model("gpt2")
    assert cfg.mlp.name == "PLAIN" and cfg.norm.name == "LAYERNORM" and cfg.position.name == "LEARNED"
    assert cfg.model_dump(mode="json")["mlp"] == "plain"
