"""from_hf of the newer families: parameter counts equal the Hugging Face models'.

Counts in ``tests/data/steptime/hf_param_counts.json`` are ``sum(p.numel() for p in model.parameters())`` (and
the number of parameter tensors) of
``AutoModelForCausalLM.from_config`` on the meta device, for released models' configs (``hf_configs/``) and the
shapes ``bench/measure_step_time.py`` trains (``hf_configs/bench/``).
"""

import json
from pathlib import Path

import pytest

import gpumodel as gm

DATA = Path(__file__).resolve().parent / "data" / "steptime"
COUNTS = json.loads((DATA / "hf_param_counts.json").read_text())["counts"]
CONFIGS = sorted(DATA.glob("hf_configs/*.json")) + sorted(DATA.glob("hf_configs/bench/*.json"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_parameter_count_equals_hugging_face(path):
    cfg = gm.TransformerConfig.from_hf(json.loads(path.read_text()))
    assert cfg.num_parameters() == COUNTS[path.stem]


def test_deepseek_v3_is_671b_with_37b_active():
    # DeepSeek-V3 technical report: 671B total parameters, 37B activated per token (MTP module not built by HF)
    cfg = gm.TransformerConfig.from_hf(json.loads((DATA / "hf_configs" / "deepseek-v3.json").read_text()))
    assert cfg.num_parameters() == 671_026_404_352
    assert cfg.active_parameters() / 1e9 == pytest.approx(37.5, abs=0.6)


def test_qwen3_30b_a3b_active_parameters():
    # Qwen3-30B-A3B: 30.5B total, 3.3B activated (Qwen3 technical report, 2025; rounding and embedding
    # counting differ by a few percent)
    cfg = gm.TransformerConfig.from_hf(json.loads((DATA / "hf_configs" / "qwen3-30b-a3b.json").read_text()))
    assert cfg.active_parameters() / 1e9 == pytest.approx(3.3, abs=0.1)


def test_qwen2_moe_with_dense_layers_between_is_refused():
    d = json.loads((DATA / "hf_configs" / "qwen1.5-moe-a2.7b.json").read_text()) | {"decoder_sparse_step": 2}
    with pytest.raises(gm.ArgumentError, match="decoder_sparse_step"):
        gm.TransformerConfig.from_hf(d)


def test_multimodal_gemma3_reads_its_language_model():
    text = json.loads((DATA / "hf_configs" / "gemma-3-1b.json").read_text())
    cfg = gm.TransformerConfig.from_hf({"model_type": "gemma3", "text_config": text})
    assert cfg.num_parameters() == COUNTS["gemma-3-1b"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_parameter_tensors_equal_hugging_face(path):
    # what foreach optimizers, clip_grad_norm_ and zero_grad loop over
    from gpumodel.training.stepkernels import parameter_tensors
    cfg = gm.TransformerConfig.from_hf(json.loads(path.read_text()))
    assert parameter_tensors(cfg) == json.loads((DATA / "hf_param_counts.json").read_text())["tensors"][path.stem]
