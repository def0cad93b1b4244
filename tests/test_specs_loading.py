"""User spec files: a YAML file, a folder, GPUMODEL_SPEC_PATH; the same validation as shipped specs."""

import os

import pytest
import yaml

import gpumodel as gm
from gpumodel.vocabulary.gpus import GPU_CATALOG
from gpumodel.records.specs import ENV_VAR, SpecError, load_records, read_yaml, spec_roots


@pytest.fixture(autouse=True)
def _fresh_catalog():
    """Loaded user GPUs must not leak into other tests."""
    GPU_CATALOG.reset()
    yield
    GPU_CATALOG.reset()


def _record(name="my-gpu", **changes):
    """A valid user record: the shipped H100 SXM5 renamed, as the plain YAML-style mapping a user writes."""
    text = (spec_roots()[0] / "gpus" / "h100-sxm.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data.update(name=name, aliases=[f"{name} alias"], display_name=f"User GPU {name}")
    peaks = changes.pop("peaks", {})
    data["peaks"].update(peaks)
    for key in list(changes):
        if changes[key] is None:
            del data[key]
            del changes[key]
    data.update(changes)
    return data


def _write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_load_a_user_file(tmp_path):
    path = _write(tmp_path / "mine.yaml", _record())
    loaded = gm.load_gpus(path)
    assert [g.name for g in loaded] == ["my-gpu"]
    assert gm.gpu("My GPU alias").name == "my-gpu"
    assert "my-gpu" in gm.list_gpus() and "h100-sxm" in gm.list_gpus()
    assert GPU_CATALOG.origin("my-gpu") == path


def test_load_a_folder_and_a_list_of_records(tmp_path):
    _write(tmp_path / "a.yaml", _record("gpu-a"))
    _write(tmp_path / "b.yml", [_record("gpu-b"), _record("gpu-c")])
    (tmp_path / "README.txt").write_text("not a spec")
    names = sorted(g.name for g in gm.load_gpus(tmp_path))
    assert names == ["gpu-a", "gpu-b", "gpu-c"]
    assert gm.gpu("gpu-c").sm_count == 132


def test_env_var_names_extra_spec_folders(tmp_path, monkeypatch):
    (tmp_path / "gpus").mkdir()
    _write(tmp_path / "gpus" / "lab.yaml", _record("lab-gpu", memory_bandwidth="3 TB/s"))
    monkeypatch.setenv(ENV_VAR, os.pathsep.join(["", str(tmp_path)]))
    GPU_CATALOG.reset()
    assert spec_roots()[-1] == tmp_path
    assert gm.gpu("lab-gpu").memory_bandwidth == 3e12
    assert "h100-sxm" in gm.list_gpus()  # shipped specs stay


def test_env_var_naming_a_missing_folder_is_an_error(tmp_path, monkeypatch):
    # was silently ignored: a typo in the variable lost the user's records without a word
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(tmp_path / "absent"), str(tmp_path)]))
    GPU_CATALOG.reset()
    with pytest.raises(SpecError, match="absent.*not a folder"):
        gm.list_gpus()
    monkeypatch.delenv(ENV_VAR)
    GPU_CATALOG.reset()


def test_unitless_dimensional_value_in_a_file_is_refused(tmp_path):
    # memory_bandwidth: 3.35 used to load as 3.35 B/s
    _write(tmp_path / "g.yaml", _record("unitless-gpu", memory_bandwidth=3.35))
    with pytest.raises(SpecError, match=r"memory_bandwidth.*no unit.*3.35 TB/s"):
        gm.load_gpus(tmp_path / "g.yaml")
    assert "unitless-gpu" not in gm.list_gpus()


def test_loading_a_folder_is_all_or_nothing(tmp_path):
    _write(tmp_path / "a.yaml", _record("good-one", memory_bandwidth="3 TB/s"))
    _write(tmp_path / "b.yaml", _record("bad-one", sm_count=-1))
    with pytest.raises(SpecError, match="bad-one"):
        gm.load_gpus(tmp_path)
    assert "good-one" not in gm.list_gpus()


def test_replace_must_be_a_real_boolean(tmp_path):
    _write(tmp_path / "a.yaml", _record("flag-gpu", memory_bandwidth="3 TB/s"))
    with pytest.raises(gm.ArgumentError, match="replace must be True or False"):
        gm.load_gpus(tmp_path / "a.yaml", replace="no")


def test_env_var_record_is_validated_too(tmp_path, monkeypatch):
    (tmp_path / "gpus").mkdir()
    _write(tmp_path / "gpus" / "bad.yaml", _record("bad-gpu", sm_count=-1))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    GPU_CATALOG.reset()
    with pytest.raises(SpecError, match="bad.yaml: record 'bad-gpu': field 'sm_count'"):
        gm.list_gpus()


def test_typo_in_a_key_names_file_record_and_field(tmp_path):
    data = _record()
    data["memory_bandwith"] = data.pop("memory_bandwidth")
    path = _write(tmp_path / "typo.yaml", data)
    with pytest.raises(SpecError) as info:
        gm.load_gpus(path)
    message = str(info.value)
    assert str(path) in message and "record 'my-gpu'" in message
    assert "'memory_bandwith': unknown field (typo?)" in message
    assert "'memory_bandwidth'" in message  # the real field is then missing


def test_typo_inside_peaks_is_named(tmp_path):
    path = _write(tmp_path / "typo.yaml", _record(peaks={"bf61": "1 TFLOP/s"}))
    with pytest.raises(SpecError, match="field 'peaks.bf61': unknown field"):
        gm.load_gpus(path)


def test_negative_bandwidth_is_named(tmp_path):
    path = _write(tmp_path / "neg.yaml", _record(memory_bandwidth="-3.35 TB/s"))
    with pytest.raises(SpecError, match=r"neg.yaml: record 'my-gpu': field 'memory_bandwidth'.*greater than 0"):
        gm.load_gpus(path)


def test_wrong_unit_is_named(tmp_path):
    path = _write(tmp_path / "unit.yaml", _record(memory_bandwidth="3.35 TB"))
    with pytest.raises(SpecError, match=r"field 'memory_bandwidth'.*not a unit of bytes/s"):
        gm.load_gpus(path)


def test_missing_source_is_named(tmp_path):
    path = _write(tmp_path / "nosource.yaml", _record(source=None))
    with pytest.raises(SpecError, match=r"nosource.yaml: record 'my-gpu': field 'source': Field required"):
        gm.load_gpus(path)


def test_placeholder_source_is_rejected(tmp_path):
    path = _write(tmp_path / "todo.yaml", _record(source="TBD"))
    with pytest.raises(SpecError, match="field 'source'.*must name a document"):
        gm.load_gpus(path)


def test_fp32_contradicting_cores_shows_the_numbers(tmp_path):
    path = _write(tmp_path / "fp32.yaml", _record(peaks={"fp32": "100 TFLOP/s"}))
    with pytest.raises(SpecError) as info:
        gm.load_gpus(path)
    message = str(info.value)
    assert "record 'my-gpu'" in message
    assert "fp32 peak 100.00 TFLOP/s disagrees with" in message
    assert "132 x 128 x 2 x 1.980 GHz = 66.91 TFLOP/s" in message  # 132*128*2*1.98e9


def test_yaml_tags_are_never_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "evil.yaml"
    path.write_text(f"!!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    with pytest.raises(SpecError, match="evil.yaml: not valid YAML"):
        gm.load_gpus(path)
    assert not marker.exists()
    obj = tmp_path / "obj.yaml"
    obj.write_text("!!python/object:gpumodel.records.gpu.GPUSpec {name: x}\n", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid YAML"):
        read_yaml(obj)


def test_broken_yaml_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(SpecError, match="broken.yaml: not valid YAML"):
        gm.load_gpus(path)


def test_non_mapping_record(tmp_path):
    path = tmp_path / "scalar.yaml"
    path.write_text("- just a string\n", encoding="utf-8")
    with pytest.raises(SpecError, match="record 0 is a str, expected a mapping"):
        load_records(path, gm.GPUSpec)


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "[]\n", "---\n"])
def test_an_empty_spec_file_says_it_is_empty(tmp_path, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text, encoding="utf-8")
    for load in (gm.load_gpus, lambda p: load_records(p, gm.TransformerConfig)):
        with pytest.raises(SpecError, match="empty.yaml: the file is empty") as info:
            load(path)
        assert "NoneType" not in str(info.value) and info.value.argument == "path"


@pytest.mark.parametrize("memory, visible", [("24 GiB", "25 GiB"), ("24 GiB", "26 GB"), ("80 GB", "90 GB"),
                                             ("85899345920 B", "81 GiB")])
def test_visible_memory_above_the_installed_memory_is_refused(tmp_path, memory, visible):
    path = _write(tmp_path / "mine.yaml", _record(memory_bytes=memory, memory_bytes_visible=visible))
    with pytest.raises(SpecError, match="mine.yaml: record 'my-gpu': field 'memory_bytes_visible': "
                                        "memory_bytes_visible .* exceeds memory_bytes") as info:
        gm.load_gpus(path)
    assert "the driver shows at most what is installed" in str(info.value)
    assert (info.value.argument, info.value.value) == ("memory_bytes_visible", visible)
    assert "my-gpu" not in gm.list_gpus()


@pytest.mark.parametrize("memory, visible", [("24 GB", "24564 MiB"), ("80 GB", "81559 MiB"), ("80 GB", "80 GiB"),
                                             ("24 GiB", "24 GiB"), ("24 GiB", "23 GiB")])
def test_visible_memory_within_the_installed_memory_loads(tmp_path, memory, visible):
    # a datasheet's decimal "GB" may be binary (the driver shows 81920 MiB of an A100 "80GB"): up to GiB is allowed
    path = _write(tmp_path / "mine.yaml", _record(memory_bytes=memory, memory_bytes_visible=visible))
    assert [g.name for g in gm.load_gpus(path)] == ["my-gpu"]


def test_duplicate_name_needs_replace(tmp_path):
    path = _write(tmp_path / "h100.yaml", _record("h100-sxm", aliases=[], notes="my clocks", sm_count=132))
    with pytest.raises(SpecError, match="duplicates the one in .*h100-sxm.yaml; pass replace=True"):
        gm.load_gpus(path)
    gm.load_gpus(path, replace=True)
    assert gm.gpu("h100-sxm").notes == "my clocks"


def test_alias_collision_is_an_error(tmp_path):
    path = _write(tmp_path / "clash.yaml", _record("other-gpu", aliases=["4090"]))
    with pytest.raises(SpecError, match="alias '4090' already names 'rtx-4090'"):
        gm.load_gpus(path)


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(SpecError, match="no such file or folder"):
        gm.load_gpus(tmp_path / "nope.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="holds no"):
        gm.load_gpus(tmp_path / "empty")


def test_origin_as_the_first_lookup():
    from gpumodel.records.specs import Catalog, UnknownGPUError

    fresh = Catalog("gpus", gm.GPUSpec, error=UnknownGPUError)
    assert fresh.origin("h100").name == "h100-sxm.yaml"


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_reset_forgets_user_records(tmp_path):
    gm.load_gpus(_write(tmp_path / "mine.yaml", _record()))
    GPU_CATALOG.reset()
    with pytest.raises(gm.UnknownGPUError):
        gm.gpu("my-gpu")
