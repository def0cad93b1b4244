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
