"""NCCL communicators' memory outside the allocator (gpumodel.core.communicators)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel.base.errors import ArgumentError
from gpumodel.core.communicators import (ALLTOALL_PEER_BYTES, COLLECTIVE_BYTES, PAIR_BYTES, communicator_bytes)
from gpumodel.core.memory_parts import CUDA_CONTEXT_BYTES

MiB = 2 ** 20


def test_reported_sizes():
    # NVIDIA/nccl issue #964: 544 MB for a group of two, 688 MB for larger ones (four A100s, after an all-reduce)
    assert PAIR_BYTES == 544 * MiB and COLLECTIVE_BYTES == 688 * MiB
    # NVIDIA/nccl issue #1685: 1.06 GB -> 4.34 GB after the first all-to-all among eight H100s: 7 peers
    assert ALLTOALL_PEER_BYTES * 7 == pytest.approx(3.28e9)


def test_one_gpu_holds_none():
    for fw in ("hf", "megatron", "deepspeed", "fsdp"):
        assert communicator_bytes(fw) == 0.0


def test_ddp_two_and_many_ranks():
    # DDP reduces on the default group: one pair communicator on 2 GPUs, one collective one on 8
    assert communicator_bytes("hf", dp=2) == 544 * MiB
    assert communicator_bytes("hf", dp=8) == 688 * MiB
    # a model split 4 ways on 4 GPUs: the tensor-parallel mesh is the whole job, one communicator; beside dp 2 its
    # own group (688) and DDP's (544) beside the default group (688)
    assert communicator_bytes("hf", tp=4) == 688 * MiB
    assert communicator_bytes("hf", tp=4, dp=2) == (688 + 688 + 544) * MiB


def test_megatron_3d_layout_by_hand():
    # tp8 pp12 dp4 (384 GPUs): default, tensor, data-parallel and model-parallel (tp x pp) groups at 688 MiB,
    # the pipeline's sends at 544 MiB: 4 * 688 + 544 = 3296 MiB
    assert communicator_bytes("megatron", dp=4, tp=8, pp=12) == 3296 * MiB
    # context parallelism adds its ring's sends (544) and nothing else changes (dp x cp is still one group)
    assert communicator_bytes("megatron", dp=2, tp=8, pp=12, cp=2) == 3296 * MiB + 544 * MiB


def test_expert_all_to_all_by_hand():
    # ep8 over one node: 7 peers with all their channels; the expert data-parallel group (16 / 8 = 2 ranks) a pair
    dense = communicator_bytes("megatron", dp=16, pp=4)
    moe = communicator_bytes("megatron", dp=16, pp=4, ep=8)
    assert moe - dense == pytest.approx(7 * ALLTOALL_PEER_BYTES + 544 * MiB)
    # ep16 reaches 8 peers across the network through one shared pool of 512 MiB; expert dp group of 1: none
    wide = communicator_bytes("megatron", dp=16, pp=4, ep=16)
    assert wide - dense == pytest.approx(7 * ALLTOALL_PEER_BYTES + 512 * MiB)


def test_hsdp_replica_group():
    # HSDP: shards over 8, replicates over 4: the default group, both groups
    assert communicator_bytes("fsdp", dp=32, shard_group=8) == 3 * 688 * MiB
    assert communicator_bytes("fsdp", dp=32) == 2 * 688 * MiB


def test_bad_input():
    with pytest.raises(ArgumentError, match="framework"):
        communicator_bytes("jax", dp=8)
    with pytest.raises(ArgumentError, match="communicator_bytes"):
        gm.training_memory("llama-2-7b", 1, 4096, communicator_bytes=-1)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["megatron", "deepspeed", "fsdp"]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2, 8]), st.sampled_from([1, 2, 4, 16]), st.sampled_from([1, 2, 8, 32]))
def test_more_parallelism_never_less_memory(fw, tp, pp, cp, dp):
    """Adding a degree adds a group (or leaves the bytes as they are): never fewer bytes."""
    base = communicator_bytes(fw, dp=dp, tp=tp, pp=pp, cp=cp)
    assert base >= 0
    assert communicator_bytes(fw, dp=dp, tp=2 * tp, pp=pp, cp=cp) >= base
    assert communicator_bytes(fw, dp=dp, tp=tp, pp=2 * pp, cp=cp) >= base


def test_broadcasts_over_layouts():
    dp = np.array([1, 2, 8])
    out = communicator_bytes("megatron", dp=dp, tp=np.array([[1], [8]]))
    assert out.shape == (2, 3)
    assert out[0, 0] == 0.0 and out[1, 2] == communicator_bytes("megatron", dp=8, tp=8)


def test_training_memory_counts_them_outside_the_allocator():
    cfg = gm.model("llama-2-7b")
    par = dict(framework="megatron", tp=2, dp=4, zero=1)
    m = gm.training_memory(cfg, 1, 4096, **par)
    assert m.communicator_bytes == communicator_bytes("megatron", dp=4, tp=2)
    assert m.total_bytes == pytest.approx(m.reserved_bytes + CUDA_CONTEXT_BYTES + m.communicator_bytes)
    left_out = gm.training_memory(cfg, 1, 4096, communicator_bytes=0, **par)
    assert left_out.peak_bytes == m.peak_bytes and left_out.reserved_bytes == m.reserved_bytes
    assert m.total_bytes - left_out.total_bytes == pytest.approx(m.communicator_bytes)
    one = gm.training_memory(cfg, 1, 4096)
    assert one.communicator_bytes == 0.0
    assert one.total_bytes == pytest.approx(one.reserved_bytes + CUDA_CONTEXT_BYTES)
