"""The web page (``gpumodel ui``) through Starlette's test client: every page, its numbers against the library's,
the errors beside their fields, uploads, and a server that answers on after a failure."""

import html
import json
import re
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pytest.importorskip("matplotlib")
pytest.importorskip("multipart")

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 to httpx and says so; either drives the app
    warnings.filterwarnings("ignore", message="Using `httpx`")
    from starlette.testclient import TestClient  # noqa: E402

import gpumodel as gm  # noqa: E402
from gpumodel.cli import main  # noqa: E402
from gpumodel.ui import create_app, url  # noqa: E402
from gpumodel.ui.forms import CONFIG_LIMIT, gpu_counts, read_config  # noqa: E402
from gpumodel.ui.views import compute  # noqa: E402

HF_CONFIG = Path(__file__).parent / "data" / "steptime" / "hf_configs" / "qwen3-0.6b.json"
#: a plan small enough to answer fast: one node of eight GPUs
SMALL_PLAN = dict(model="llama-3.2-1b", system="dgx-h100", gpus="8", tokens="100B", global_batch="64", seq="2048")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), follow_redirects=False) as c:
        yield c


def _field_error(body: str, name: str) -> str | None:
    """The error text shown beside field ``name`` (None: the field shows none)."""
    m = re.search(rf'<div class="field bad" id="field-{name}">.*?<span class="err" role="alert">(.*?)</span>', body)
    return html.unescape(m.group(1)) if m else None


def _table(body: str, ident: str) -> list[list[str]]:
    m = re.search(rf'<table id="{ident}">(.*?)</table>', body, re.S)
    assert m, f"no table {ident}"
    return [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", m.group(1))]


# --------------------------------------------------------------------------------------------------- the pages
def test_home_leads_to_the_plan_page(client):
    r = client.get("/")
    assert r.status_code in (302, 303, 307) and r.headers["location"] == "/plan"
    assert client.get("/favicon.ico").status_code == 204


def test_plan_page_ranks_the_layouts_the_library_ranks(client):
    r = client.get("/plan", params={**SMALL_PLAN, "price": "2.5"})
    assert r.status_code == 200, r.text[:500]
    rows = _table(r.text, "plan-table")
    want = gm.plan_training("llama-3.2-1b", "dgx-h100", tokens="100B", global_batch=64, seq_len=2048, num_gpus=8,
                            price_per_gpu_hour=2.5, top=15)
    assert rows[0] == want.headers() and "cost USD" in rows[0] and "+-" in rows[0]
    assert rows[1:] == want.table(15)
    assert "<svg" in r.text and "Time against GPU count" in r.text
    assert 'value="100B"' in r.text                  # the inputs stay in the form: the link is the answer


def test_plan_page_searches_fp8_kernels_and_schedules_as_the_library_does(client):
    query = {**SMALL_PLAN, "gpus": "16", "fp8": "both", "attention": "sdpa, fa2", "schedule": "1f1b,zero_bubble",
             "objective": "energy"}
    r = client.get("/plan", params=query)
    assert r.status_code == 200, r.text[:500]
    want = gm.plan_training("llama-3.2-1b", "dgx-h100", tokens="100B", global_batch=64, seq_len=2048, num_gpus=16,
                            fp8=[False, True], attention_kernel=["sdpa", "fa2"],
                            pipeline_schedule=["1f1b", "zero_bubble"], objective="energy", top=15)
    assert _table(r.text, "plan-table")[1:] == want.table(15)


def test_plan_page_recomputes_the_modules_named_as_the_library_does(client):
    query = {**SMALL_PLAN, "gpus": "16", "recompute": "layernorm, mlp"}
    r = client.get("/plan", params=query)
    assert r.status_code == 200, r.text[:500]
    want = gm.plan_training("llama-3.2-1b", "dgx-h100", tokens="100B", global_batch=64, seq_len=2048, num_gpus=16,
                            recompute_modules=["layernorm", "mlp"], top=2000)
    assert _table(r.text, "plan-table")[1:] == want.table(15)
    selective = [row for row in want.rows if row["checkpointing"] == "selective"]
    assert selective and {row["recompute_modules"] for row in selective} == {"layernorm,mlp"}


def test_plan_over_a_range_searches_its_gpu_counts(client):
    r = client.get("/plan", params={**SMALL_PLAN, "gpus": "2-8"})
    assert r.status_code == 200, r.text[:500]
    rows = _table(r.text, "plan-table")[1:]
    want = gm.plan_training("llama-3.2-1b", "dgx-h100", tokens="100B", global_batch=64, seq_len=2048,
                            num_gpus=[2, 4, 8], top=15)
    assert rows == want.table(15)
    assert "<dd>2, 4, 8</dd>" in r.text               # the counts searched (1 left out by the range)


def test_fit_page_answers_as_the_sizing_functions(client):
    query = dict(model="llama-3.2-1b", gpu="h100", batch="2", seq="2048", precision="amp_bf16", optimizer="adamw",
                 checkpointing="none", framework="hf", dp="1", tp="1", pp="1", zero="0")
    out = compute("fit", query)
    assert out["status"] == 200, out["general"] or out["errors"]
    kw = dict(precision="amp_bf16", optimizer="adamw", checkpointing="none", framework="hf", dp=1, tp=1, pp=1, zero=0)
    assert out["numbers"]["max_batch"] == gm.max_batch_size("llama-3.2-1b", "h100", seq_len=2048, **kw)
    assert out["numbers"]["max_seq"] == gm.max_seq_len("llama-3.2-1b", "h100", batch_size=2, multiple_of=128, **kw)
    mem = gm.training_memory("llama-3.2-1b", 2, 2048, **kw)
    assert out["numbers"]["memory"].total_bytes == mem.total_bytes and out["numbers"]["fits"]
    r = client.get("/fit", params=query)
    assert r.status_code == 200 and "<svg" in r.text
    table = _table(r.text, "breakdown-table")
    assert table[1][0] == "weights" and float(table[1][1]) == pytest.approx(mem.breakdown["weights"] / 2**30, abs=0.01)


def test_fit_page_decides_at_the_edge_as_fits_does(client):
    # Llama-3-8B in bf16 with checkpointing at 6 x 2048 on an H100: 83 GiB with the fixed reserve, but near the
    # capacity the caching allocator's replay decides (gm.fits): the page says what gm.fits says, and how sure
    query = dict(model="llama-3-8b", gpu="h100", batch="6", seq="2048", precision="bf16", optimizer="adamw",
                 checkpointing="full", framework="hf", dp="1", tp="1", pp="1", zero="0")
    out = compute("fit", query)
    margin = gm.memory_margin("llama-3-8b", "h100", batch_size=6, seq_len=2048, precision="bf16", checkpointing="full")
    assert out["numbers"]["fits"] == bool(margin.fits) == bool(gm.fits("llama-3-8b", "h100", batch_size=6,
                                                                        seq_len=2048, precision="bf16",
                                                                        checkpointing="full"))
    assert str(margin.decided_by) == "allocator" and margin.uncertain
    r = client.get("/fit", params=query)
    assert "could go either way" in r.text and "caching allocator replayed" in r.text


def test_fit_page_says_when_it_does_not_fit(client):
    r = client.get("/fit", params=dict(model="llama-3-70b", gpu="h100", batch="1", seq="4096", framework="hf",
                                       dp="1", zero="0", checkpointing="none"))
    assert r.status_code == 200 and 'id="no-fit"' in r.text and "Does not fit" in r.text


def test_serve_page_gives_the_gpus_for_the_traffic(client):
    query = dict(model="llama-3-8b", gpu="h100", tp="1", prompt="1024", output="256", ttft="1s", tpot="50ms",
                 dtype="bf16", engine="graph", rate="40")
    out = compute("serve", query)
    cap = gm.serving_capacity("llama-3-8b", "h100", prompt_len=1024, output_len=256, ttft_slo=1.0, tpot_slo=0.05)
    assert out["numbers"]["gpus"] == cap.gpus_for(40)
    r = client.get("/serve", params=query)
    assert r.status_code == 200 and "<svg" in r.text and "TPOT target" in r.text
    assert f"{cap.gpus_for(40):,} for 40 requests/s" in r.text


def test_serve_page_without_room_for_a_request(client):
    r = client.get("/serve", params=dict(model="llama-3-70b", gpu="rtx-4090", tp="1"))
    assert r.status_code == 200 and 'id="no-serve"' in r.text


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("page, query, field, text", [
    ("plan", {"gpus": "abc"}, "gpus", "expected a whole number"),
    ("plan", {"gpus": "64-8"}, "gpus", "smaller count to the larger"),
    ("plan", {"gpus": "64:8:8"}, "gpus", "START <= STOP"),
    ("plan", {"model": "llama-9"}, "model", "did you mean 'llama-3-8b'"),
    ("plan", {"system": "dgx-h10"}, "system", "did you mean 'dgx-h100'"),
    ("plan", {"tokens": "lots"}, "tokens", "tokens='lots'"),
    ("plan", {"price": "-1"}, "price", "price"),
    ("plan", {"seq": "0"}, "seq", "must be >= 1"),
    ("plan", {"schedule": "1f1b,gpipe"}, "schedule", "pipeline_schedule"),
    ("plan", {"attention": "sdpa,fa9"}, "attention", "attention_kernel"),
    ("plan", {"recompute": "layernorm,ffn"}, "recompute", "recompute_modules"),
    ("plan", {"recompute": "mlp", "framework": "fsdp"}, "recompute", "recompute_modules"),
    ("plan", {"fp8": "on", "framework": "fsdp"}, "fp8", "fp8"),
    ("plan", {"fp8": "mxfp8"}, "fp8", "Blackwell"),
    ("fit", {"batch": "0"}, "batch", "must be >= 1"),
    ("fit", {"gpu": "h10"}, "gpu", "did you mean"),
    ("fit", {"precision": "fp9"}, "precision", "is not one of"),
    ("serve", {"tpot": "1x"}, "tpot", "unknown unit 'x'"),
    ("serve", {"tp": "3"}, "tp", "must divide the attention heads"),
    ("serve", {"rate": "many"}, "rate", "rate='many'"),
])
def test_the_librarys_error_shows_beside_its_field(client, page, query, field, text):
    r = client.get(f"/{page}", params={**(SMALL_PLAN if page == "plan" else {}), **query})
    assert r.status_code == 400
    shown = _field_error(r.text, field)
    assert shown is not None, f"no error beside {field}"
    assert text in shown and re.match(r"\w+Error: ", shown)
    assert r.text.count('class="err"') == 1           # beside that field only


def test_an_error_of_no_field_shows_above_the_form(client, monkeypatch):
    def refuse(*args, **kwargs):
        raise gm.UnsupportedError("no such engine here")

    monkeypatch.setattr(gm, "serving_capacity", refuse)
    r = client.get("/serve")
    assert r.status_code == 400 and 'id="error"' in r.text and "UnsupportedError: no such engine here" in r.text


def test_a_bug_is_shown_and_the_server_answers_on(client, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gm, "plan_training", crash)
    r = client.get("/plan", params=SMALL_PLAN)
    assert r.status_code == 500 and "internal error (RuntimeError: boom)" in r.text and "<form" in r.text
    monkeypatch.undo()
    assert client.get("/fit").status_code == 200


def test_what_a_user_types_is_escaped(client):
    r = client.get("/plan", params={**SMALL_PLAN, "model": "<script>alert(1)</script>"})
    assert r.status_code == 400 and "<script>alert(1)" not in r.text and "&lt;script&gt;" in r.text


# -------------------------------------------------------------------------------------------------- uploads
def test_an_uploaded_config_goes_into_the_link(client):
    data = HF_CONFIG.read_bytes()
    r = client.post("/config", data={"page": "fit", "query": "batch=1&seq=1024&framework=hf&dp=1&zero=0"},
                    files={"config": ("config.json", data, "application/json")})
    assert r.status_code == 303
    where = urlsplit(r.headers["location"])
    query = parse_qs(where.query)
    assert where.path == "/fit" and query["batch"] == ["1"] and json.loads(query["config"][0]) == json.loads(data)
    page = client.get(r.headers["location"])
    assert page.status_code == 200, page.text[:400]
    assert "from config.json" in page.text and 'name="config"' in page.text
    want = gm.training_memory(gm.TransformerConfig.from_hf(json.loads(data)), 1, 1024, checkpointing="full",
                              framework="hf")
    assert f"{want.total_bytes / 2**30:,.2f} GiB" in page.text


@pytest.mark.parametrize("content, text", [
    (b"", "choose a config.json"),
    (b"{not json", "not a JSON file"),
    (b"[1, 2]", "one JSON object"),
    (json.dumps({"model_type": "llama", "pad": "x" * CONFIG_LIMIT}).encode(), "too long for a link"),
    (b" " * (2 << 20), "is no config.json"),
])
def test_a_bad_upload_shows_beside_the_model(client, content, text):
    r = client.post("/config", data={"page": "plan", "query": "gpus=8"},
                    files={"config": ("config.json", content, "application/json")})
    assert r.status_code == 400 and text in (_field_error(r.text, "model") or "")
    assert 'value="8"' in r.text                      # the other inputs kept


def test_a_config_the_library_refuses_shows_beside_the_model(client):
    r = client.get("/fit", params={"config": json.dumps({"model_type": "bert"})})
    assert r.status_code == 400 and "unsupported model_type 'bert'" in _field_error(r.text, "model")


# ----------------------------------------------------------------------------------------- helpers and the CLI
def test_gpu_counts_and_config_reading():
    assert gpu_counts("64") == [64] and gpu_counts("8-64") == [8, 16, 32, 64] and gpu_counts("-4") == [1, 2, 4]
    assert gpu_counts("6 .. 40") == [6, 8, 16, 32, 40] and gpu_counts("24,8,8") == [8, 24]
    assert gpu_counts("64:200:64") == [64, 128, 192]      # as `gpumodel plan --gpus` reads it
    with pytest.raises(gm.ArgumentError) as err:
        gpu_counts("0")
    assert err.value.argument == "gpus"
    assert "id2label" not in read_config(json.dumps({"model_type": "llama", "id2label": {"0": "a"}}))
    assert url("0.0.0.0", 80) == "http://127.0.0.1:80/" and url("::1", 8765) == "http://[::1]:8765/"


def test_cli_ui_starts_the_server_and_prints_its_address(monkeypatch, capsys):
    import gpumodel.ui.app as app

    seen = {}

    def fake_serve(host, port, announce=None, **kwargs):
        seen.update(host=host, port=port)
        announce(url(host, port))

    monkeypatch.setattr(app, "serve", fake_serve)
    assert main(["ui"]) == 0
    assert seen == {"host": "127.0.0.1", "port": 8765}
    assert "http://127.0.0.1:8765/" in capsys.readouterr().out
    assert main(["ui", "--port", "9001", "--host", "0.0.0.0"]) == 0 and seen["port"] == 9001


def test_cli_ui_refuses_a_port_in_use(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["ui", "--port", str(s.getsockname()[1])]) == 2
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_cli_ui_without_the_extra_says_what_to_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert main(["ui"]) == 2
    assert 'pip install "gpumodel[ui]"' in capsys.readouterr().err
