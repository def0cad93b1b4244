"""Errors a program can read: ``argument``, ``value`` and ``allowed`` on the library's errors, pickling, and
records built in code refusing a bad field with the library's own error."""

import importlib
import pickle
import pkgutil

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

import gpumodel as gm
from gpumodel.base import arguments, numeric, readable
from gpumodel.base.errors import (ArgumentError, ArgumentTypeError, GpumodelError, RecordError, SpecError,
                                  UnitError, UnknownNameError)
from gpumodel.base.units import parse_quantity
from gpumodel.core.opcost import OpArgumentError, UnknownOpError
from gpumodel.records.arch import ArchLimits, UnknownArchError
from gpumodel.records.dtypes import UnknownDTypeError
from gpumodel.records.gpu import GPUSpec
from gpumodel.records.specs import describe_errors
from gpumodel.records.system import SystemSpec, UnknownSystemError
from gpumodel.records.transformer import MODEL_CATALOG, HFConfigError, TransformerConfig, UnknownModelError, load_models
from gpumodel.vocabulary import parallel_rules, resolvers
from gpumodel.vocabulary.precision import kv_cache_dtype, precision, weight_dtype


def _raised(call, kind=GpumodelError):
    with pytest.raises(kind) as info:
        call()
    return info.value


def _fields(exc):
    return exc.argument, exc.value, exc.allowed


# ---------------------------------------------------------------------------------------------- the base class
def test_attributes_default_to_none_and_the_message_is_unchanged():
    exc = ArgumentError("batch_size must be a positive integer, got -1")
    assert _fields(exc) == (None, None, None)
    exc = ArgumentError("batch_size must be positive", argument="batch_size", value=-1, allowed="a whole number >= 1")
    assert _fields(exc) == ("batch_size", -1, "a whole number >= 1")
    assert str(exc) == "batch_size must be positive" and exc.args == ("batch_size must be positive",)
    assert str(UnknownNameError("no gpu named 'h10'", argument="gpu")) == "no gpu named 'h10'"  # not quoted


# ---------------------------------------------------------------------------------------------- central raise sites
def test_training_memory_names_the_batch_size():
    exc = _raised(lambda: gm.training_memory("llama-3-8b", batch_size=-1, seq_len=128), ArgumentError)
    assert (exc.argument, exc.value) == ("batch_size", -1)
    assert "positive integer" in exc.allowed
    assert str(exc) == "batch_size must be a positive integer (or an array of them), got -1"


@pytest.mark.parametrize("call, argument, value, allowed", [
    (lambda: numeric.positive_int([4, 0, 8], "batch_size"), "batch_size", 0, "positive integer"),
    (lambda: numeric.positive_int(2.5, "seq_len"), "seq_len", 2.5, "positive integer"),
    (lambda: numeric.positive_int("8", "dp"), "dp", "8", "positive integer"),
    (lambda: numeric.nonnegative_int(-2, "zero"), "zero", -2, ">= 0"),
    (lambda: numeric.bounded_int(300, "registers_per_thread", 0, 255), "registers_per_thread", 300, "0..255"),
    (lambda: numeric.bounded_int(float("nan"), "warps", 1), "warps", None, ">= 1"),
    (lambda: numeric.positive_number(0, "bandwidth"), "bandwidth", 0, "a positive number"),
    (lambda: numeric.nonnegative_number(-1.5, "flops"), "flops", -1.5, "a number >= 0"),
])
def test_numeric_checks(call, argument, value, allowed):
    exc = _raised(call, ArgumentError)
    assert exc.argument == argument
    if value is not None:
        assert exc.value == value
    assert allowed in exc.allowed


def test_broadcastable_names_both_arguments():
    exc = _raised(lambda: numeric.broadcastable(batch_size=[1, 2], seq_len=[128, 256, 512]), ArgumentError)
    assert exc.argument == "batch_size, seq_len"
    assert exc.value == {"batch_size": (2,), "seq_len": (3,)}


def test_generic_argument_checks():
    assert _fields(_raised(lambda: arguments.flag("no", "sparse"))) == ("sparse", "no", "True or False")
    exc = _raised(lambda: arguments.choice(gm.vocabulary.Optimizer, "adamx", "optimizer"), ArgumentError)
    assert (exc.argument, exc.value) == ("optimizer", "adamx") and "'adamw'" in exc.allowed
    assert _raised(lambda: arguments.path_argument("  ", "out")).argument == "out"
    exc = _raised(lambda: arguments.path_argument(3, "out"), ArgumentTypeError)
    assert (exc.argument, exc.value) == ("out", 3)

    def to(a, b=1, *, c=2):
        return a

    exc = _raised(lambda: arguments.passed_on({"d": 5}, to, "caller"), ArgumentTypeError)
    assert (exc.argument, exc.value, exc.allowed) == ("d", 5, "a, b, c")
    exc = _raised(lambda: arguments.passed_on({"b": 5}, to, "caller", taken=("b",)), ArgumentTypeError)
    assert exc.argument == "b"
    exc = _raised(lambda: arguments.deprecated_alias("zero_stage", "zero", 2, 3), ArgumentError)
    assert (exc.argument, exc.value) == ("zero_stage", 2) and "zero" in exc.allowed


@pytest.mark.parametrize("call, argument, value", [
    (lambda: readable.parse_count("1X", "tokens"), "tokens", "1X"),
    (lambda: readable.parse_count("1.5", "tokens"), "tokens", "1.5"),
    (lambda: readable.parse_bytes("32K", "smem"), "smem", "32K"),
    (lambda: readable.parse_bytes("32KB", "smem", binary_only=True), "smem", "32KB"),
    (lambda: readable.parse_seconds("soon", "ttft_slo"), "ttft_slo", "soon"),
    (lambda: readable.parse_seconds("5 fortnights", "ttft_slo"), "ttft_slo", "5 fortnights"),
    (lambda: readable.parse_number("x", "ratio"), "ratio", "x"),
    (lambda: readable.token_count(0.5), "tokens", 0.5),
    (lambda: readable.token_count([1e9, 2e9]), "tokens", [1e9, 2e9]),
    (lambda: readable.duration("0s", "tpot_slo"), "tpot_slo", "0s"),
])
def test_readable_quantities(call, argument, value):
    exc = _raised(call, ArgumentError)
    assert (exc.argument, exc.value) == (argument, value)
    assert exc.allowed


def test_unit_errors_carry_the_value():
    exc = _raised(lambda: parse_quantity("3.35 TB", "bytes/s"), UnitError)
    assert exc.value == "3.35 TB" and "B/s" in exc.allowed
    assert _raised(lambda: parse_quantity(1, "furlongs"), UnitError).argument == "dimension"


def test_vocabulary():
    exc = _raised(lambda: precision("fp33"), ArgumentError)
    assert (exc.argument, exc.value) == ("precision", "fp33") and "'amp_bf16'" in exc.allowed
    exc = _raised(lambda: weight_dtype("int3"), ArgumentError)
    assert (exc.argument, exc.value) == ("dtype", "int3") and "'int4'" in exc.allowed
    exc = _raised(lambda: kv_cache_dtype("int8", gm.DType.BF16, timed=True), ArgumentError)
    assert (exc.argument, exc.value) == ("kv_dtype", "int8") and "'int8'" not in exc.allowed
    exc = _raised(lambda: resolvers.resolve_gpu(3), ArgumentTypeError)
    assert (exc.argument, exc.value) == ("gpu", 3)
    exc = _raised(lambda: resolvers.resolve_model(7, "model"), ArgumentTypeError)
    assert (exc.argument, exc.value) == ("model", 7)
    assert _raised(lambda: resolvers.resolve_system(1.5), ArgumentError).argument == "system"
    assert _raised(lambda: resolvers.resolve_gpus([]), ArgumentError).argument == "gpus"
    exc = _raised(lambda: gm.dtype("fp7"), UnknownDTypeError)
    assert (exc.argument, exc.value) == ("dtype", "fp7") and "bf16" in exc.allowed


@pytest.mark.parametrize("call, kind, argument, value, close", [
    (lambda: gm.gpu("h10"), gm.UnknownGPUError, "gpu", "h10", "h100"),
    (lambda: gm.model("llama-9"), UnknownModelError, "model", "llama-9", "llama"),
    (lambda: gm.system("dgx-h1000"), UnknownSystemError, "system", "dgx-h1000", "dgx-h100"),
    (lambda: gm.arch_limits("sm_99"), UnknownArchError, "compute capability", "sm_99", "9.0"),
])
def test_unknown_names(call, kind, argument, value, close):
    exc = _raised(call, kind)
    assert (exc.argument, exc.value) == (argument, value)
    assert close in exc.allowed and close in str(exc)
    assert isinstance(exc, LookupError)


def test_catalog_refuses_a_record_of_the_wrong_kind():
    exc = _raised(lambda: MODEL_CATALOG.get(3), ArgumentTypeError)
    assert (exc.argument, exc.value) == ("model", 3)


def test_op_arguments():
    exc = _raised(lambda: gm.ops.matmul(0, 8, 8), OpArgumentError)
    assert (exc.argument, exc.value) == ("m", 0) and "positive integer" in exc.allowed
    exc = _raised(lambda: gm.ops.matmul([1, 2], [1, 2, 3], 8), OpArgumentError)
    assert exc.argument == "m, n"
    exc = _raised(lambda: gm.ops.cost("matmull", 8, 8, 8), UnknownOpError)
    assert (exc.argument, exc.value) == ("op", "matmull") and "matmul" in exc.allowed
    exc = _raised(lambda: gm.ops.cost("matmul", 8), OpArgumentError)
    assert exc.allowed == "m, n, k"
    exc = _raised(lambda: gm.OpCost("x", "bf16", flops=-1.0, bytes_read=0.0, bytes_written=0.0), OpArgumentError)
    assert (exc.argument, exc.value) == ("flops", -1.0)


def test_parallel_rules():
    cfg = gm.model("llama-3-70b")
    exc = _raised(lambda: parallel_rules.tensor_parallel(cfg, 3), ArgumentError)
    assert (exc.argument, exc.value) == ("tp", 3) and "num_heads=64" in exc.allowed
    exc = _raised(lambda: parallel_rules.tensor_parallel(cfg, np.array([2, 3])), ArgumentError)
    assert (exc.argument, exc.value) == ("tp", 3) and type(exc.value) is int
    assert _fields(_raised(lambda: parallel_rules.parallel_degrees(cfg, pp=100)))[:2] == ("pp", 100)
    assert _fields(_raised(lambda: parallel_rules.parallel_degrees(cfg, dp=2, zero=4)))[:2] == ("zero", 4)
    assert _fields(_raised(lambda: parallel_rules.parallel_degrees(cfg, ep=2)))[:2] == ("ep", 2)
    exc = _raised(lambda: parallel_rules.parallel_degrees(gm.model("mixtral-8x7b"), ep=3))
    assert (exc.argument, exc.value) == ("ep", 3)
    exc = _raised(lambda: gm.training_memory("llama-3-8b", 1, 128, tp=3))
    assert (exc.argument, exc.value) == ("tp", 3)


def test_hf_config_names_the_missing_key():
    exc = _raised(lambda: TransformerConfig.from_hf(dict(model_type="llama", hidden_size=64, num_hidden_layers=2,
                                                         num_attention_heads=4, vocab_size=100)), HFConfigError)
    assert exc.argument == "intermediate_size" and str(exc) == "llama config lacks the key 'intermediate_size'"
    exc = _raised(lambda: TransformerConfig.from_hf({"model_type": "t5"}), HFConfigError)
    assert (exc.argument, exc.value) == ("model_type", "t5") and "llama" in exc.allowed


# ---------------------------------------------------------------------------------------------- pickling
def _all_error_classes():
    for info in pkgutil.walk_packages(gm.__path__, "gpumodel."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # a module of an optional dependency (plots without matplotlib)
            pass
    seen, todo = [], [GpumodelError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return sorted(seen, key=lambda c: f"{c.__module__}.{c.__qualname__}")


ERROR_CLASSES = _all_error_classes()


def test_every_error_class_is_found():
    names = {c.__name__ for c in ERROR_CLASSES}
    assert {"GpumodelError", "ArgumentError", "ArgumentTypeError", "UnknownNameError", "UnknownGPUError",
            "SpecError", "RecordError", "UnitError", "UnsupportedError", "UnsupportedDTypeError", "OpArgumentError",
            "UnknownOpError", "DuplicateOpError", "HFConfigError", "UnknownDTypeError",
            "CalibrationUnavailableError"} <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__qualname__)
def test_every_error_pickles_with_its_fields(cls):
    exc = cls("something is wrong", argument="batch_size", value=[1, -1], allowed="whole numbers >= 1")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert str(back) == str(exc) == "something is wrong" and back.args == exc.args
    assert _fields(back) == ("batch_size", [1, -1], "whole numbers >= 1")
    bare = pickle.loads(pickle.dumps(cls("plain")))
    assert str(bare) == "plain" and _fields(bare) == (None, None, None)


def test_raised_errors_pickle():
    for call in (lambda: gm.gpu("h10"), lambda: gm.training_memory("llama-3-8b", -1, 128),
                 lambda: TransformerConfig(hidden_size=0, num_layers=1, num_heads=1, intermediate_size=1, vocab_size=1)):
        exc = _raised(call)
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and _fields(back) == _fields(exc)


def test_subclasses_keep_their_builtins():
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentTypeError, TypeError)
    assert issubclass(UnknownNameError, LookupError) and issubclass(UnknownOpError, ValueError)
    assert issubclass(RecordError, ValueError) and issubclass(SpecError, ValueError)


# ---------------------------------------------------------------------------------------------- records built in code
_LLAMA = dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, vocab_size=100)


def _gpu_fields(**changes):
    data = gm.gpu("h100").model_dump()
    data.update(changes)
    return data


def _system_fields(**changes):
    data = dict(name="test-node", display_name="test", gpu="h100-sxm", gpus_per_node=8, node_power="10 kW",
                source="test", intra_node={"fabric": "nvswitch", "bandwidth": "450 GB/s", "source": "test"})
    data.update(changes)
    return data


def _arch_fields(**changes):
    data = gm.arch_limits("9.0").model_dump()
    data.update(changes)
    return data


@pytest.mark.parametrize("build, field, value", [
    (lambda: TransformerConfig(**{**_LLAMA, "hidden_size": 0}), "hidden_size", 0),
    (lambda: TransformerConfig(**{**_LLAMA, "attn_dropout": 1.5}), "attn_dropout", 1.5),
    (lambda: TransformerConfig(**{**_LLAMA, "mlp": "swiglu"}), "mlp", "swiglu"),
    (lambda: gm.GPUSpec(**_gpu_fields(sm_count=0)), "sm_count", 0),
    (lambda: gm.GPUSpec(**_gpu_fields(memory_bandwidth="3.35 TB")), "memory_bandwidth", "3.35 TB"),
    (lambda: gm.GPUSpec(**_gpu_fields(peaks={"fp32": -1.0})), "peaks.fp32", -1.0),
    (lambda: gm.SystemSpec(**_system_fields(gpus_per_node=0)), "gpus_per_node", 0),
    (lambda: gm.SystemSpec(**_system_fields(intra_node={"fabric": "carrier-pigeon", "bandwidth": "1 GB/s",
                                                          "source": "test"})), "intra_node.fabric", "carrier-pigeon"),
    (lambda: gm.ArchLimits(**_arch_fields(max_registers_per_thread=300)), "max_registers_per_thread", 300),
])
def test_a_bad_field_raises_a_record_error_naming_it(build, field, value):
    exc = _raised(build, RecordError)
    assert isinstance(exc, ValueError) and not isinstance(exc, ValidationError)
    assert (exc.argument, exc.value) == (field, value)
    assert f"field {field!r}" in str(exc) and str(exc).startswith("invalid ")


@pytest.mark.parametrize("cls, data, field", [
    (TransformerConfig, {k: v for k, v in _LLAMA.items() if k != "vocab_size"}, "vocab_size"),
    (GPUSpec, {k: v for k, v in _gpu_fields().items() if k != "memory_bandwidth"}, "memory_bandwidth"),
    (SystemSpec, {k: v for k, v in _system_fields().items() if k != "intra_node"}, "intra_node"),
    (ArchLimits, {k: v for k, v in _arch_fields().items() if k != "warp_size" and k != "source"}, "source"),
])
def test_a_missing_field_is_named(cls, data, field):
    exc = _raised(lambda: cls(**data), RecordError)
    assert (exc.argument, exc.value) == (field, None)
    assert f"invalid {cls.__name__}: field {field!r}: Field required" in str(exc)


def test_an_unknown_field_is_named():
    exc = _raised(lambda: TransformerConfig(**_LLAMA, hiden_size=64), RecordError)
    assert exc.argument == "hiden_size" and "unknown field (typo?)" in str(exc)


def test_cross_checks_are_record_errors_too():
    exc = _raised(lambda: TransformerConfig(**{**_LLAMA, "num_heads": 6, "num_kv_heads": 4}), RecordError)
    assert "multiple of num_kv_heads" in str(exc) and exc.argument is None
    exc = _raised(lambda: gm.SystemSpec(**_system_fields(gpu="a100-sxm4-80gb", nvlink_sharp=True)), RecordError)
    assert "nvlink_sharp" in str(exc)
    exc = _raised(lambda: gm.ArchLimits(**_arch_fields(max_warps_per_sm=48)), RecordError)
    assert "max_warps_per_sm" in str(exc)


def test_valid_records_are_built_as_before():
    cfg = TransformerConfig(**_LLAMA)
    assert cfg.head_dim == 16 and cfg.num_kv_heads == 4
    assert gm.GPUSpec(**_gpu_fields()) == gm.gpu("h100")
    assert gm.SystemSpec(**_system_fields()).gpus_per_node == 8
    assert gm.ArchLimits(**_arch_fields()) == gm.arch_limits("9.0")


def test_model_validate_keeps_pydantic_error_and_text():
    data = {**_LLAMA, "hidden_size": 0}
    with pytest.raises(ValidationError) as info:
        TransformerConfig.model_validate(data)
    exc = _raised(lambda: TransformerConfig(**data), RecordError)
    assert str(exc) == f"invalid TransformerConfig: {describe_errors(info.value)}"


def test_spec_files_still_name_file_record_and_field(tmp_path):
    bad = tmp_path / "tiny.yaml"
    bad.write_text(yaml.safe_dump({"name": "tiny", **_LLAMA, "num_layers": 0}), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_models(bad)
    assert str(info.value) == f"{bad}: record 'tiny': field 'num_layers': Input should be greater than 0"
    assert "tiny" not in MODEL_CATALOG  # all or nothing
