"""Sizing and the commands it emits (issue 52): launch scripts that run as written, the checkpoint people serve,
the engines' own memory defaults, one context check for every planning command, drafts of one tokenizer, prices
of a device given by file, and the options' help and exit statuses."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import roofline as rl
from roofline.errors import WorkloadError
from roofline.serving.emit import launch_command
from roofline.serving.round import shares_tokenizer
from roofline.serving.serve import Request
from roofline.serving.sizing import Target
from roofline.serving_api import size
from roofline.specs.hf_config import model_from_hf_config

ROOT = Path(__file__).resolve().parents[1]
REQ = Request(input_tokens=1024, output_tokens=512)

# A fake engine: records its argv (one JSON list per line) and, for trtllm-serve, the YAML it was given.
STUB = """#!/usr/bin/env python3
import json, os, sys
rec = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
if "--extra_llm_api_options" in rec:
    rec.append(open(rec[rec.index("--extra_llm_api_options") + 1]).read())
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps(rec) + "\\n")
"""


def _stubs(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("vllm", "python", "python3", "trtllm-serve"):
        (bin_dir / name).write_text(STUB.replace("python3", sys.executable, 1))
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _roofline_tty(argv: list[str], columns: int) -> str:
    """What a terminal of ``columns`` shows (through a pseudo-terminal, as a user copies it), CR LF as LF."""
    import pty
    main, child = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "roofline", *argv], stdout=child, stderr=subprocess.PIPE, cwd=ROOT,
                         env={**os.environ, "COLUMNS": str(columns)})
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:   # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    os.close(main)
    assert p.returncode == 0, p.stderr.read()
    return out.decode().replace("\r\n", "\n")


def _roofline_piped(argv: list[str]) -> str:
    p = subprocess.run([sys.executable, "-m", "roofline", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def _run_script(text: str, tmp: Path, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list]:
    script, log = tmp / "launch.sh", tmp / "argv.log"
    script.write_text(text)
    log.write_text("")
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp, timeout=60,
                       env={**os.environ, **(env or {}), "PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}",
                            "STUB_LOG": str(log)})
    return p, [json.loads(line) for line in log.read_text().splitlines()]


@functools.cache   # the JSON of one argv: the same whatever the text was printed to
def _emitted_json(argv: tuple[str, ...]) -> dict:
    return json.loads(_roofline_piped([*argv, "--json"]))


SIZE = ["size", "llama-3.1-70b", "--devices", "h100-sxm", "--users", "100", "--min-tokens-per-s-per-user", "20",
        "--draft", "llama-3.1-8b", "--alpha", "0.7", "--kv", "fp8"]


@pytest.mark.skipif(sys.platform == "win32", reason="bash and a pseudo-terminal")
@pytest.mark.parametrize("engine,where", [("vllm", "tty80"), ("sglang", "pipe"), ("trtllm", "tty80"),
                                          ("trtllm", "pipe")])   # each engine once, both outputs where files are written
def test_emitted_script_runs_as_written_with_the_engines_stubbed(engine, where, tmp_path):
    """The output of `size --emit`, saved as it is printed (a terminal of 80 columns, or a pipe), is a bash script:
    the table and every note are comments (a wrapped line stays one), and bash runs exactly the commands the JSON
    lists (argv for argv, each TensorRT-LLM option with its own YAML file), with no 'command not found'."""
    _stubs(tmp_path)
    argv = [*SIZE, "--emit", engine]
    text = _roofline_tty(argv, 80) if where == "tty80" else _roofline_piped(argv)
    assert "\x1b" not in text
    p, ran = _run_script(text, tmp_path)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    launch = _emitted_json(tuple(argv))["launch"]
    expected = [item["argv"] + list(item["files"].values()) for item in launch]
    assert [r[1:] for r in ran] == [e[1:] for e in expected] and len(ran) == 3   # speculative, aggregated, disagg.
    assert [r[0] for r in ran] == [e[0] for e in expected]
    if engine == "trtllm":
        names = [name for item in launch for name in item["files"]]
        assert len(names) == len(set(names)) == 3
        assert all((tmp_path / n).read_text() == f for item in launch for n, f in item["files"].items())
    commands = {line for item in launch for line in item["command"].splitlines()}
    assert {line for line in text.splitlines() if line and not line.startswith("#")} == commands   # the rest: #


def test_a_model_without_a_checkpoint_gets_a_placeholder_the_shell_refuses(tmp_path):
    """A config.json path is served from its folder (the path given, absolute); a model read from a lone JSON file
    has no checkpoint to name: the command reads $MODEL_DIR (or $DRAFT_DIR), and bash stops until it is set,
    saying what to set, instead of running `vllm serve /path/to/NAME`."""
    _stubs(tmp_path)
    cfg = json.loads((ROOT / "roofline" / "presets" / "llama-3.1-8b.json").read_text())
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    folder = tmp_path / "my ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "lone.json").write_text(json.dumps(cfg))
    argv = ["size", str(folder / "config.json"), "--devices", "h100-sxm", "--users", "10",
            "--min-tokens-per-s-per-user", "20", "--draft", str(tmp_path / "lone.json"), "--alpha", "0.7"]
    for engine in ("vllm", "sglang", "trtllm"):
        text = _roofline_piped([*argv, "--emit", engine])
        assert "/path/to" not in text and "DRAFT_DIR" in text
        p, ran = _run_script(text, tmp_path)
        assert p.returncode != 0 and "set DRAFT_DIR to the checkpoint folder of lone" in p.stderr
        p, ran = _run_script(text, tmp_path, env={"DRAFT_DIR": "/models/draft"})
        assert p.returncode == 0, p.stderr
        assert len(ran) == 3 and all(str(folder) in r for r in ran)     # the target: the folder given, as is
        assert sum("/models/draft" in " ".join(r) for r in ran) == 1        # the speculative option's draft


@pytest.mark.parametrize("preset, repo", [
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"), ("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct"),
    ("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct"), ("llama-2-7b", "meta-llama/Llama-2-7b-chat-hf"),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1"), ("falcon-180b", "tiiuae/falcon-180B-chat"),
    ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct"), ("qwen3-32b", "Qwen/Qwen3-32B"),   # post-trained already
    ("gpt-oss-120b", "openai/gpt-oss-120b")])
def test_presets_name_the_checkpoint_people_serve(preset, repo):
    """The command serves the chat/-Instruct repository where the model has one (the repository ids as on the
    Hugging Face hub; Qwen3's un-suffixed repositories are the post-trained ones, its base ones end in -Base)."""
    m = rl.load_model(preset)
    assert (m.served_checkpoint or rl.serving.emit.hf_repo(m)) == repo


def _option(model, device="b200:2", users=200, speed=30.0, **kw):
    opts = size(model, [rl.resolve_group(device)], Target(users=users, min_tokens_per_s_per_user=speed, request=REQ),
                **kw)
    return next(o for o in opts if o.feasible and o.placement == "aggregated")


def test_memory_flags_keep_the_engines_defaults_unless_the_batch_needs_more():
    """vLLM's --gpu-memory-utilization defaults to 0.9, TensorRT-LLM's --kv_cache_free_gpu_memory_fraction to 0.9,
    SGLang computes --mem-fraction-static per GPU: a batch that fits in that is launched without the flag (not at
    0.95 for both); a batch sized up to the last few percent of memory gets the share it needs, above the
    default, with a note."""
    m = rl.load_model("llama-3.1-70b")
    roomy = _option(m)
    flags = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static",
             "trtllm": "--kv_cache_free_gpu_memory_fraction"}
    for engine, flag in flags.items():
        assert flag not in launch_command(engine, m, roomy, request=REQ).argv
    tight = _option(m, device="h100-sxm:2", users=300, speed=10.0)
    for engine in ("vllm", "sglang"):
        cmd = launch_command(engine, m, tight, request=REQ)
        share = float(cmd.argv[cmd.argv.index(flags[engine]) + 1])
        assert 0.9 < share <= 0.95 and any("more memory than" in n for n in cmd.notes)


def test_size_and_placements_refuse_a_request_beyond_the_context(run_cli):
    """--isl 1M on Llama-3.1-8B (131,072 positions): size and placements refuse, naming max_position_embeddings,
    as --emit did (one check: roofline.serving.serve.check_context); the API's size too."""
    for argv in (("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "10", "--min-tokens-per-s-per-user",
                  "20", "--isl", "1M"),
                 ("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--isl", "1M")):
        code, out, err = run_cli(*argv)
        assert code == 1 and not out and "131,072-token context (max_position_embeddings)" in err, err
        assert len(err.strip().splitlines()) == 1
    with pytest.raises(WorkloadError, match="max_position_embeddings"):
        size("llama-3.1-8b", ["h100-sxm"], Target(users=1, min_tokens_per_s_per_user=1.0,
                                                   request=Request(input_tokens=1_000_000, output_tokens=1)))


QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "use_sliding_window": False, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643}
# https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json, https://huggingface.co/Qwen/Qwen2.5-7B/.../config.json
QWEN_05B = {**QWEN, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
            "max_position_embeddings": 32768}
QWEN_7B = {**QWEN, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 131072}


def test_a_qwen_draft_of_the_same_tokenizer_is_accepted(run_cli, tmp_path):
    """Qwen2.5-0.5B drafts for Qwen2.5-7B: one tokenizer, its table padded to 151,936 and 152,064 rows. Another
    family's vocabulary (Llama-3.1's) and another tokenizer of one family (Mistral v0.1's 32,000 against v0.3's
    32,768) are still refused."""
    small, big = model_from_hf_config(QWEN_05B, id="qwen2.5-0.5b"), model_from_hf_config(QWEN_7B, id="qwen2.5-7b")
    assert shares_tokenizer(small, big)
    assert not shares_tokenizer(rl.load_model("llama-3.1-8b"), big)
    mistral = {**QWEN_05B, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": None}
    assert not shares_tokenizer(model_from_hf_config({**mistral, "vocab_size": 32000}),
                                model_from_hf_config({**mistral, "vocab_size": 32768}))
    (tmp_path / "d.json").write_text(json.dumps(QWEN_05B))
    (tmp_path / "t.json").write_text(json.dumps(QWEN_7B))
    code, out, err = run_cli("size", str(tmp_path / "t.json"), "--devices", "h100-sxm", "--users", "64",
                             "--min-tokens-per-s-per-user", "30", "--draft", str(tmp_path / "d.json"), "--alpha",
                             "0.7", "--json")
    assert code == 0, err
    spec = [o for o in json.loads(out)["options"] if o["placement"] == "speculative"]
    assert spec and spec[0]["feasible"], spec


def test_a_device_given_by_file_is_priced_by_its_id(run_cli, tmp_path):
    """--usd-per-device-hour h100-nvl=4 prices the device the command reads from h100-nvl.toml (its id is no
    shipped one's)."""
    spec = (ROOT / "hardware_specs" / "h100-sxm.toml").read_text().replace('id = "h100-sxm"', 'id = "h100-nvl"')
    path = tmp_path / "h100-nvl.toml"
    path.write_text(spec.replace('aliases = ["h100", "h100-sxm5", "h100-sxm-80gb"]', "aliases = []"))
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", str(path), "--users", "10",
                             "--min-tokens-per-s-per-user", "20", "--usd-per-device-hour", "h100-nvl=4", "--json")
    assert code == 0, err
    assert json.loads(out)["prices"]["h100-nvl"]["usd_per_hour"] == 4


def test_size_help_and_options_say_what_they_do(run_cli):
    """size's --weights help says the checkpoint's format is the default (it reads quantization_config), size
    takes --lm-head, and spec and placements take --usd-per-device-hour (and use it)."""
    out = subprocess.run([sys.executable, "-m", "roofline", "size", "--help"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "COLUMNS": "200"}).stdout
    flat = " ".join(out.split())
    assert "default: the checkpoint's" in flat and "--lm-head" in flat and "bf16 where native" not in flat
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "10",
                             "--min-tokens-per-s-per-user", "20", "--lm-head", "fp8", "--json")
    assert code == 0 and json.loads(out)["options"][0]["formats"]["head"] == "fp8"
    code, out, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm",
                             "--usd-per-device-hour", "h100-sxm=1", "--json")
    assert code == 0 and json.loads(out)["placements"][0]["metrics"]["usd_per_hour"] == pytest.approx(1.0)
    code, out, err = run_cli("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--verify-on",
                             "h100-sxm:4", "--alpha", "0.8", "--gamma", "1", "--usd-per-device-hour", "h100-sxm=2",
                             "--json")
    row = json.loads(out)["rows"][0]
    assert code == 0 and row["usd_per_million_output_tokens"] == pytest.approx(8 / 3600 / row["tokens_per_s"] * 1e6)


def test_a_mistyped_field_suggests_three_names(run_cli):
    """A --set field that is none of the device's: the closest three, not all 50 on one line."""
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100-sxm.hbm.bandwith=1TB/s")
    assert code == 1 and "did you mean 'hbm.bandwidth', " in err and len(err) < 250
    assert err.count("'") == 8   # the field given and three suggestions


@pytest.mark.parametrize("argv", [("stage", "llama-3.1-8b", "h100-sxm"),
                                  ("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "1",
                                   "--min-tokens-per-s-per-user", "1")])
@pytest.mark.parametrize("bad", [("--weights", "fp9"), ("--kv", "fp9"), ("--lm-head", "fp9"), ("--stack", "vllmx"),
                                 ("--experts", "fp9")])
def test_a_bad_option_value_is_a_usage_error_whichever_option(run_cli, argv, bad):
    """A value none of the names an option takes exits 2, for a format as for a stack (and argparse's choices):
    one line naming the option; not 1 for --weights and 2 for --stack, nor a table of failed options."""
    code, out, err = run_cli(*argv, *bad)
    assert code == 2 and not out and err.startswith(f"roofline: usage error: {bad[0]}"), (code, err)
    assert len(err.strip().splitlines()) == 1


def test_emitted_text_quotes_every_word():
    """Shell-quoting of argv words (a path with a space) and of a placeholder inside a JSON word."""
    m = rl.load_model("llama-3.1-70b")
    cmd = launch_command("vllm", m, _option(m), request=REQ)
    words = shlex.split(cmd.text.replace("\\\n", " "))
    assert words == list(cmd.argv)
