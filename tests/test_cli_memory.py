"""``gpumodel memory``: when a run does not fit, what would (from the library's memory and sizing functions)."""

import json

import pytest

import gpumodel as gm
from gpumodel.cli import main

GiB = 2 ** 30


def _rows(out: str) -> dict:
    """The suggestion table under "what would fit": change -> (GiB per GPU, fits)."""
    lines = out.split("what would fit", 1)[1].splitlines()[3:]
    rows = {}
    for line in lines:
        change, gib, fits = line.rsplit(None, 2)
        rows[change.strip()] = (gib, fits)
    return rows


def test_70b_training_on_an_h100_suggests_what_would_fit(capsys):
    assert main(["memory", "llama-3-70b", "--gpu", "h100", "--batch", "1", "--seq", "4096"]) == 0
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "largest batch that fits at seq 4096: 0" in out
    rows = _rows(out)
    kw = dict(batch_size=1, seq_len=4096)
    for change, options in [("--checkpointing full", dict(checkpointing="full")),
                            ("--precision bf16", dict(precision="bf16")),
                            ("--optimizer adamw_8bit", dict(optimizer="adamw_8bit")),
                            ("--checkpointing full --precision bf16 --optimizer adamw_8bit",
                             dict(checkpointing="full", precision="bf16", optimizer="adamw_8bit"))]:
        need = gm.training_memory("llama-3-70b", **kw, **options).total_bytes
        assert rows[change] == (f"{need / GiB:,.2f}", "no"), change      # 70.6B parameters: none fits one GPU
    # bf16 weights and optimizer states instead of fp32 ones: about half of the amp_bf16 run's 1,446 GiB
    assert float(rows["--precision bf16"][0].replace(",", "")) < 0.6 * 1446
    plan = gm.min_gpus("llama-3-70b", "h100", 1, 4096)
    assert rows[f"{plan.num_gpus} GPUs: --dp {plan.dp} --tp {plan.tp} --zero {plan.zero} --sp"] == \
        (f"{plan.per_gpu_bytes / GiB:,.2f}", "yes")


def test_suggestions_in_json_and_none_when_it_fits(capsys):
    assert main(["memory", "llama-3-70b", "--gpu", "h100", "--seq", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is False and data["suggestions"][-1]["fits"] is True
    assert data["suggestions"][0] == {"change": "--checkpointing full", "fits": False,
                                      "total_bytes": gm.training_memory("llama-3-70b", 1, 4096,
                                                                        checkpointing="full").total_bytes}
    assert main(["memory", "gpt2", "--batch", "2", "--seq", "256", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["suggestions"] == []
    assert main(["memory", "gpt2", "--batch", "2", "--seq", "256"]) == 0
    assert "what would fit" not in capsys.readouterr().out


def test_8b_training_fits_with_the_three_changes_together(capsys):
    assert main(["memory", "llama-3-8b", "--gpu", "h100", "--seq", "4096"]) == 0
    rows = _rows(capsys.readouterr().out)
    both = gm.training_memory("llama-3-8b", 1, 4096, checkpointing="full", precision="bf16", optimizer="adamw_8bit")
    assert rows["--checkpointing full --precision bf16 --optimizer adamw_8bit"] == (f"{both.total_bytes / GiB:,.2f}",
                                                                                    "yes")


def test_serving_memory_suggests_smaller_formats_and_tensor_parallelism(capsys):
    assert main(["memory", "llama-3-70b", "--inference", "--gpu", "4090"]) == 0
    rows = _rows(capsys.readouterr().out)
    int4 = gm.inference_memory("llama-3-70b", 1, 2048, dtype="int4", new_tokens=256).total_bytes
    assert rows["--dtype int4"] == (f"{int4 / GiB:,.2f}", "no")         # 70.6B x 0.5 B = 35 GB > 24 GB
    plan = gm.min_gpus("llama-3-70b", "4090", 1, 2048, training=False, new_tokens=256)
    assert rows[f"{plan.num_gpus} GPUs: --tp {plan.tp}"] == (f"{plan.per_gpu_bytes / GiB:,.2f}", "yes")


def test_parallel_layout_counts_nccl_communicators(capsys):
    """On several GPUs the total carries NCCL's buffers (outside the allocator); on one GPU there are none."""
    args = ["memory", "llama-3-8b", "--gpu", "h100", "--batch", "1", "--seq", "4096"]
    assert main([*args, "--tp", "2", "--dp", "4", "--zero", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    m = gm.training_memory("llama-3-8b", 1, 4096, tp=2, dp=4, zero=1)
    assert d["communicator_bytes"] == m.communicator_bytes > 0
    assert d["total_bytes"] == pytest.approx(m.reserved_bytes + gm.core.memory.CUDA_CONTEXT_BYTES + m.communicator_bytes)
    assert main([*args, "--tp", "2", "--dp", "4", "--zero", "1"]) == 0
    assert "NCCL communicators" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["communicator_bytes"] == 0.0
