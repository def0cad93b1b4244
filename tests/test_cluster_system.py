"""System records: shipped catalog, sources, units, user files, the system resolver."""

import pytest

import gpumodel as gm
from gpumodel.records.system import SystemSpec, node_system
from gpumodel.vocabulary import resolve_system

REQUIRED = ["dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72", "mi300x-platform",
            "rtx4090-8x-pcie", "aws-p4d.24xlarge", "aws-p4de.24xlarge", "aws-p5.48xlarge", "aws-p5e.48xlarge",
            "gcp-a3-megagpu-8g", "azure-nd96isr-h100-v5"]


def test_shipped_systems_cover_the_issue():
    assert set(REQUIRED) <= set(gm.list_systems())


@pytest.mark.parametrize("name", REQUIRED)
def test_every_record_and_link_is_sourced(name):
    s = gm.system(name)
    assert len(s.source) > 10 and len(s.intra_node.source) > 10
    assert s.inter_node is None or len(s.inter_node.source) > 10
    assert s.gpu.name == s.gpu_name and s.node_power_watts > s.gpus_per_node * 50


def test_dgx_h100_values_in_si_units():
    s = gm.system("DGX H100")
    assert s.intra_node.bandwidth == 450e9          # 900 GB/s bidirectional / 2
    assert s.inter_node.bandwidth == 400e9 / 8      # 400 Gb/s -> 50 GB/s
    assert s.gpu_power_watts == pytest.approx(10200 / 8)


def test_aliases_and_cloud_names():
    assert gm.system("p5.48xlarge").name == "aws-p5.48xlarge"
    assert gm.list_systems(gpu="h200") == ["aws-p5e.48xlarge", "gcp-a3-ultragpu-8g", "hgx-h200"]


def test_unknown_system_suggests_close_names():
    with pytest.raises(gm.UnknownNameError, match="dgx-h100"):
        gm.system("dgx-h1000")


def test_user_yaml(tmp_path):
    (tmp_path / "my.yaml").write_text(
        "name: my-box\ndisplay_name: my box\ngpu: l40s\ngpus_per_node: 4\n"
        "intra_node: {fabric: pcie, bandwidth: 32 GB/s, source: PCIe 4.0 x16}\n"
        "node_power: 2 kW\nsource: my own measurement\n")
    from gpumodel.records.system import SYSTEM_CATALOG

    try:
        recs = gm.load_systems(tmp_path / "my.yaml")
        assert recs[0].gpus_per_node == 4 and gm.system("my-box").node_power_watts == 2000
    finally:
        SYSTEM_CATALOG.reset()


def test_typo_and_unknown_gpu_are_spec_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndisplay_name: x\ngpu: h100\ngpus_per_nod: 8\nintra_node: {fabric: pcie, bandwidth: 1 GB/s, "
                   "source: abc}\nnode_power: 1 kW\nsource: abcd\n")
    from gpumodel.records.system import SYSTEM_CATALOG

    try:
        with pytest.raises(gm.SpecError, match="gpus_per_nod"):
            gm.load_systems(bad)
    finally:
        SYSTEM_CATALOG.reset()


def test_resolve_system():
    assert resolve_system("dgx-h100") is gm.system("dgx-h100")
    assert resolve_system("h100").name == "dgx-h100"        # a bare GPU: one node of it
    assert resolve_system(gm.gpu("l4")).inter_node is None
    assert isinstance(resolve_system(gm.system("hgx-h200")), SystemSpec)
    with pytest.raises(gm.ArgumentError, match="system"):
        resolve_system(3)


def test_node_system_of_a_pcie_gpu():
    s = node_system("l4")
    assert s.intra_node.fabric == "pcie" and s.intra_node.bandwidth == 16e9  # PCIe 4.0 x16, one direction
