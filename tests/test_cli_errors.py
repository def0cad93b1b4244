"""Bad input to every command ends in one line on stderr and exit code 2, never a traceback.

The crash list of the review (issue "one vocabulary and one validation layer") comes first, each with
the input that used to crash; then a battery of about forty bad arguments over every command; then the
exit codes and the closed pipe, run as a real process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumodel.cli import main

DATA = Path(__file__).parent / "data" / "calibration"


def run(argv, capsys):
    """``main(argv)``: exit code, stdout and the stderr lines."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def refused(argv, capsys, *needles):
    """``argv`` is refused: exit 2, one stderr line ``gpumodel CMD: error: ...`` naming the needles."""
    code, out, err = run(argv, capsys)
    assert code == 2, (argv, code, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"gpumodel {argv[0]}: error: ") or err[0].startswith("gpumodel: error: "), err
    assert "Traceback" not in err[0] and "internal error" not in err[0], err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{x")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    (tmp_path / "empty.jsonl").write_text('{"environment": {}}\n')
    return tmp_path


# ---------------------------------------------------------------------------------------------- the crashes
def test_inference_tp_zero_is_refused_not_a_zero_division(capsys):
    # used to be ZeroDivisionError in inference_memory's weights / tp
    refused(["memory", "llama-2-70b", "--inference", "--tp", "0"], capsys, "--tp", "'0'", ">= 1")


@pytest.mark.parametrize("name, needle", [
    ("list.json", "expected a JSON object"),  # used to be AttributeError: 'list' object has no attribute 'get'
    ("bad.json", "cannot read a JSON file"),
    ("missing.json", "no such file"),
])
def test_hf_config_that_is_not_a_json_object(files, name, needle, capsys):
    refused(["memory", "--hf-config", files / name], capsys, "--hf-config", needle)


@pytest.mark.parametrize("name, needle", [
    ("missing.jsonl", "no such file"),  # used to be FileNotFoundError
    ("list.jsonl", "not a JSON-lines file"),  # used to be AttributeError inside load_points
    ("bad.json", "not a JSON-lines file"),
    ("empty.jsonl", "no measured points"),
])
def test_calibrate_from_points_that_cannot_be_read(files, name, needle, capsys):
    refused(["calibrate", "--from-points", files / name, "--out", files / "c.yaml"], capsys, "--from-points", needle)
    assert not (files / "c.yaml").exists()


@pytest.mark.parametrize("argv", [
    ["memory", "gpt2", "--batch", "2", "--seq", "128"],
    ["roofline", "softmax", "64", "64"],
    ["occupancy", "--threads", "256", "--regs", "32"],
])
def test_plot_into_a_missing_folder(tmp_path, argv, capsys):
    # used to be FileNotFoundError from savefig, after all the work was done
    target = tmp_path / "no-such-folder" / "x.png"
    refused([*argv, "--plot", target], capsys, "--plot", "does not exist")
    refused([*argv, "--plot", tmp_path], capsys, "--plot", "is a folder")


def test_calibrate_out_into_a_missing_folder_is_refused_before_the_fit(tmp_path, capsys):
    refused(["calibrate", "--from-points", DATA / "do_bench" / "quick.jsonl", "--out", tmp_path / "nope" / "c.yaml"], capsys,
            "--out", "does not exist")


def test_output_file_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    # an OSError at write time (permissions, full disk) names the file, one line, exit 2
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    def denied(self, path, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", denied)
    refused(["roofline", "softmax", "64", "64", "--plot", tmp_path / "r.png"], capsys, "r.png", "Permission denied")


# ---------------------------------------------------------------------------------------------- ignored flags
@pytest.mark.parametrize("argv, needles", [
    (["--dtype", "int4"], ("--dtype needs --inference", "--precision")),
    (["--new-tokens", "16"], ("--new-tokens needs --inference",)),
    (["--kv-dtype", "fp8"], ("--kv-dtype needs --inference",)),
    (["--inference", "--optimizer", "sgd"], ("--optimizer applies to training",)),
    (["--inference", "--precision", "fp32"], ("--precision applies to training",)),
    (["--inference", "--zero", "1"], ("--zero applies to training",)),
    (["--inference", "--sp"], ("--sp applies to training",)),
    (["--inference", "--no-cache"], ("--no-cache applies to training",)),
])
def test_memory_refuses_flags_its_mode_ignores(argv, needles, capsys):
    refused(["memory", "llama-3-8b", *argv], capsys, *needles)


def test_memory_inference_flags_are_used_with_inference(capsys):
    code, out, _ = run(["memory", "llama-3-8b", "--inference", "--dtype", "int4", "--new-tokens", "16", "--json"],
                       capsys)
    assert code == 0 and json.loads(out)["options"]["dtype"] == "int4"


@pytest.mark.parametrize("value", ["32KB", "32kB", "32k", "1MB", "48K"])
def test_shared_memory_in_decimal_units_is_refused(value, capsys):
    refused(["occupancy", "--threads", "256", "--regs", "32", "--smem", value], capsys, "--smem", "KiB" if "k" in
            value.lower() else "MiB", "binary")


def test_shared_memory_message_says_what_to_write(capsys):
    refused(["occupancy", "--threads", "256", "--regs", "32", "--smem", "32KB"], capsys, "write 32KiB (or 32768)")


@pytest.mark.parametrize("smem, expected", [("32KiB", 32768), ("32768", 32768), ("0", 0), ("48KiB", 48 * 2 ** 10)])
def test_shared_memory_in_binary_units_or_bytes(smem, expected, capsys):
    code, out, _ = run(["occupancy", "--threads", "256", "--regs", "32", "--static-smem", smem, "--json"], capsys)
    assert code == 0 and json.loads(out)["static_shared_bytes"] == expected
    code, out, _ = run(["occupancy", "--threads", "256", "--regs", "32", "--smem", smem, "--json"], capsys)
    assert code == 0 and json.loads(out)["dynamic_shared_bytes"] == expected


def test_static_shared_memory_above_48_kib_is_refused(capsys):
    # static shared memory is capped at 48 KiB a block; more is dynamic (--smem)
    refused(["occupancy", "--threads", "256", "--regs", "32", "--static-smem", "1MiB"], capsys,
            "static_shared_bytes = 1048576", "48 KiB")
    code, out, _ = run(["occupancy", "--threads", "256", "--regs", "32", "--smem", "1MiB", "--json"], capsys)
    assert code == 0 and json.loads(out)["dynamic_shared_bytes"] == 2 ** 20


# ---------------------------------------------------------------------------------------------- the battery
BATTERY = [
    # top level
    (["nosuch"], "invalid choice"),
    (["--bogus"], "unrecognized arguments"),
    # gpus / gpu
    (["gpus", "--vendor", "intel"], "--vendor"),
    (["gpus", "--json", "extra"], "unrecognized arguments"),
    (["gpu", "h10"], "no gpu named 'h10'"),
    (["gpu", "h100,,a100"], "several separated by commas"),
    (["gpu", "h100,nosuch"], "no gpu named 'nosuch'"),
    (["gpu"], "required"),
    # memory
    (["memory"], "give a model preset name"),
    (["memory", "no-such-model"], "no model named"),
    (["memory", "gpt2", "--gpu", "h10"], "no gpu named"),
    (["memory", "gpt2", "--batch", "0"], "--batch"),
    (["memory", "gpt2", "--batch", "-1"], "--batch"),
    (["memory", "gpt2", "--batch", "x"], "--batch"),
    (["memory", "gpt2", "--seq", "1.5"], "--seq"),
    (["memory", "gpt2", "--seq", "nan"], "--seq"),
    (["memory", "gpt2", "--dp", "0"], "--dp"),
    (["memory", "gpt2", "--zero", "4"], "--zero"),
    (["memory", "gpt2", "--zero", "3"], "dp > 1"),
    (["memory", "llama-2-70b", "--tp", "3"], "tp=3 must divide"),
    (["memory", "gpt2", "--precision", "fp8"], "--precision"),
    (["memory", "gpt2", "--inference", "--dtype", "int3"], "dtype='int3'"),
    (["memory", "gpt2", "--inference", "--new-tokens", "-1"], "--new-tokens"),
    (["memory", "gpt2", "--list"], "--list"),
    (["memory", "gpt2", "--hf-config", "x.json"], "not both"),
    # roofline / estimate
    (["roofline"], "required"),
    (["roofline", "matmal", "1", "2", "3"], "unknown op"),
    (["roofline", "matmul", "1", "2"], "matmul takes 3 sizes"),
    (["roofline", "matmul", "0", "8", "8"], "m='0'"),
    (["roofline", "matmul", "1.5", "8", "8"], "m='1.5'"),
    (["roofline", "matmul", "8", "8", "1e400"], "k='1e400'"),
    (["roofline", "matmul", "8", "8", "nan"], "k='nan'"),
    (["roofline", "matmul", "8", "8", "8", "--dtype", "fp9"], "unknown dtype"),
    (["roofline", "matmul", "8", "8", "8", "--level", "l1"], "--level"),
    (["roofline", "matmul", "8", "8", "8", "--causal"], "--causal applies to attention only"),
    (["roofline", "softmax", "8", "8", "--inputs", "2"], "--inputs applies to elementwise only"),
    (["roofline", "attention", "1", "32", "128", "64", "--kv-heads", "0"], "--kv-heads"),
    (["roofline", "attention", "1", "32", "128", "64", "--kv-heads", "5"], "kv_heads"),
    (["roofline", "elementwise", "100", "--flops-per-element", "x"], "--flops-per-element"),
    (["roofline", "elementwise", "100", "--flops-per-element", "-1"], "--flops-per-element"),
    (["roofline", "--gpu", ",", "matmul", "8", "8", "8"], "--gpu"),
    (["estimate", "--gpu", "h10", "matmul", "8", "8", "8"], "no gpu named"),
    (["estimate", "matmul", "8", "8", "8", "--calibration", "missing.yaml"], "--calibration"),
    (["estimate", "matmul", "8", "8", "8", "--calibration", "c.yaml", "--uncalibrated"], "--uncalibrated"),
    (["estimate", "matmul", "8", "8", "8", "--impl", "naive"], "unrecognized arguments"),
    # occupancy
    (["occupancy", "--threads", "256"], "--regs"),
    (["occupancy", "--threads", "x", "--regs", "32"], "--threads"),
    (["occupancy", "--threads", "256", "--regs", "32", "--smem", "lots"], "--smem"),
    (["occupancy", "--threads", "256", "--regs", "32", "--smem", "-5"], "--smem"),
    (["occupancy", "--threads", "256", "--regs", "32", "--smem", "1.5"], "--smem"),
    (["occupancy", "--gpu", "h100", "--cc", "9.0", "--threads", "256", "--regs", "32"], "not allowed with"),
    (["occupancy", "--cc", "99.0", "--threads", "256", "--regs", "32"], "99.0"),
    (["occupancy", "--threads", "256", "--regs", "32", "--carveout", "x"], "--carveout"),
    (["occupancy", "--cc", "9", "--threads", "256", "--regs", "32"], "MAJOR.MINOR"),
    (["occupancy", "--cc", "abc", "--threads", "256", "--regs", "32"], "MAJOR.MINOR"),
    (["roofline", "elementwise", "100", "--outputs", "0"], "--outputs"),
    # calibrate
    (["calibrate"], "--out"),
    (["calibrate", "--out", "c.yaml", "--gpu", "h10"], "no gpu named"),
    (["calibrate", "--out", "c.yaml", "--from-points", "p.jsonl", "--quick"], "--quick"),
]


@pytest.mark.parametrize("argv, needle", BATTERY, ids=[" ".join(a) for a, _ in BATTERY])
def test_bad_input_is_one_line_and_exit_2(argv, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("gpu: h200-sxm\n")
    (tmp_path / "p.jsonl").write_text((DATA / "do_bench" / "quick.jsonl").read_text())
    refused(argv, capsys, needle)


#: bad input the library once refused with a bare ValueError (the command line reported an internal error)
LIBRARY_BARE_ERRORS = [
    (["occupancy", "--threads", "2048", "--regs", "32"], "threads_per_block"),  # occupancy_model._int_array
    (["occupancy", "--threads", "256", "--regs", "300"], "registers_per_thread"),
    (["occupancy", "--threads", "256", "--regs", "32", "--carveout", "150"], "carveout"),
    (["occupancy", "--gpu", "mi300x", "--threads", "256", "--regs", "32"], "mi300x"),
    (["estimate", "--gpu", "h100", "softmax", "8", "8", "--calibration", "c.yaml"], "calibration is for"),
    (["memory", "--hf-config", "heads0.json"], "num_heads"),  # was a pydantic ValidationError from from_hf
]


@pytest.mark.parametrize("argv, needle", LIBRARY_BARE_ERRORS, ids=[" ".join(a) for a, _ in LIBRARY_BARE_ERRORS])
def test_bad_input_the_library_refuses_is_one_line_and_exit_2(argv, needle, tmp_path, monkeypatch, capsys):
    from gpumodel.calibration.record import calibration_for

    monkeypatch.chdir(tmp_path)
    calibration_for("h200").save(tmp_path / "c.yaml")
    (tmp_path / "heads0.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 0, "num_hidden_layers": 2,
        "intermediate_size": 11008, "vocab_size": 32000}))
    refused(argv, capsys, needle)


def test_library_errors_are_exit_2_and_one_line(capsys):
    # a GpumodelError from deep inside the library: the message, one line
    refused(["memory", "llama-3-70b", "--tp", "3"], capsys, "must divide")


def test_an_internal_error_is_one_line_exit_1(monkeypatch, capsys):
    import gpumodel.cli.gpus as gpus

    def broken(args):
        return 1 / 0

    monkeypatch.setattr(gpus, "_gpus", broken)
    monkeypatch.delenv("GPUMODEL_DEBUG", raising=False)
    code, _, err = run(["gpus"], capsys)
    assert code == 1 and len(err) == 1
    assert err[0].startswith("gpumodel gpus: error: internal error: ZeroDivisionError") and "GPUMODEL_DEBUG" in err[0]
    monkeypatch.setenv("GPUMODEL_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["gpus"])


def test_library_warnings_are_one_line(monkeypatch, capsys):
    import warnings

    import gpumodel.cli.gpus as gpus

    def warns(args):
        warnings.warn("the run does not fit\n  in memory", UserWarning)
        return 0

    monkeypatch.setattr(gpus, "_gpus", warns)
    code, _, err = run(["gpus"], capsys)
    assert code == 0 and err == ["gpumodel gpus: warning: the run does not fit in memory"]


def test_help_and_version_exit_0(capsys):
    assert main(["--version"]) == 0
    assert main(["memory", "--help"]) == 0
    assert main([]) == 2


# ---------------------------------------------------------------------------------------------- real processes
def _gpumodel(*argv, **kw):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    return subprocess.run([sys.executable, "-m", "gpumodel", *argv], env=env, stderr=subprocess.PIPE, **kw)


def test_closed_pipe_exits_quietly():
    # `gpumodel gpus | head -1`: the reader has gone; a BrokenPipeError must not print a traceback
    read, write = os.pipe()
    os.close(read)
    try:
        proc = _gpumodel("gpus", stdout=write, timeout=60)
    finally:
        os.close(write)
    assert proc.stderr == b""
    assert proc.returncode == 1


def test_exit_codes_of_a_real_process(tmp_path):
    bad = _gpumodel("memory", "llama-2-70b", "--inference", "--tp", "0", stdout=subprocess.PIPE, timeout=60)
    assert bad.returncode == 2 and bad.stdout == b""
    assert bad.stderr.decode().count("\n") == 1 and b"Traceback" not in bad.stderr
    missing = _gpumodel("calibrate", "--from-points", str(tmp_path / "missing.jsonl"), "--out",
                        str(tmp_path / "c.yaml"), stdout=subprocess.PIPE, timeout=60)
    assert missing.returncode == 2 and b"no such file" in missing.stderr and b"Traceback" not in missing.stderr


# ---------------------------------------------------------------------------------------------- any text
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_TEXT = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"-?[0-9_.]{0,6}(e-?[0-9]{1,3})?\s?(k|K|Ki|M|Mi|G|GiB|GB|KiB|kB|B|T|s|ms|us|nan|inf)?", fullmatch=True),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(smem=_TEXT, size=_TEXT)
def test_any_text_is_answered_or_refused_in_one_line(smem, size, capsys):
    for argv in (["occupancy", "--threads", "256", "--regs", "32", f"--smem={smem}", "--json"],
                 ["roofline", "matmul", "8", "8", f"{size}", "--json"] if not size.startswith("-") else ["gpus", "--json"]):
        code, out, err = run(argv, capsys)
        assert code in (0, 2), (argv, err)
        if code == 2:
            assert len(err) == 1 and "internal error" not in err[0], (argv, err)
        else:
            strict_json = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
            assert strict_json is not None


# ---------------------------------------------------------------------------------------------- found by the audit
@pytest.mark.parametrize("argv, needles", [
    (["serve", "llama-3-8b", "--rate", "0"], ("--rate", "> 0")),           # was: silently ignored
    (["serve", "llama-3-8b", "--plot", "/no-such-folder/x.png"], ("--plot", "does not exist")),
    (["serve", "llama-3-8b", "--prompt", "0"], ("--prompt", ">= 1")),
    (["plan", "llama-3-8b", "--top", "0"], ("top",)),                      # was: "no layout fits", exit 1
    (["plan", "llama-3-8b", "--top", "-1"], ("top",)),                     # was: accepted
    (["plan", "llama-3-8b", "--gpus", "8", "--max-gpus", "4"], ("num_gpus", "max_gpus")),  # was: max ignored
    (["memory", "llama-3-8b", "--sp"], ("sequence_parallel", "tp > 1")),  # was: accepted without --tp
])
def test_audit_cli_inputs_are_refused(argv, needles, capsys):
    refused(argv, capsys, *needles)


def test_plan_where_no_layout_fits_is_an_answer_not_an_internal_error(capsys):
    # used to exit 1, the code of an internal error, with the answer on stdout
    code, out, err = run(["plan", "llama-3-405b", "--system", "rtx-4090", "--max-gpus", "2", "--seq", "1024",
                          "--global-batch", "8"], capsys)
    assert code == 0 and "no layout fits" in out and err == []


def test_a_warning_of_several_calls_is_printed_once(capsys):
    code, out, err = run(["memory", "gpt2", "--seq", "2048"], capsys)
    assert code == 0 and len([line for line in err if "learned positions" in line]) == 1, err
