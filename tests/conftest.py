import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from rich.console import Console

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def run_cli():
    """Run the CLI in-process; returns (exit status, stdout, stderr)."""
    from roofline.ui.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        buf = io.StringIO()
        console = Console(file=buf, width=160, color_system=None, soft_wrap=True)
        err = io.StringIO()
        code = main(list(argv), console=console, err_console=Console(file=err, width=160, color_system=None))
        return code, buf.getvalue(), err.getvalue()

    return run


def golden() -> dict:
    """Published numbers with their URLs (tests/golden/published.toml)."""
    import tomllib
    from pathlib import Path
    return tomllib.loads((Path(__file__).parent / "golden" / "published.toml").read_text())


def validation_header() -> str:
    """The measurements CSV header without the optional stack_version, dp, requests, poll_steps, token_budget,
    max_batch, kv_memory_fraction, served-load, speculative-draft, compiled-shape, dp_balance, draft_kv_budget,
    allreduce_fusion and prefill-pool columns (the tests' rows use the older format, which must keep working)."""
    from roofline.evidence.validate import shipped_data
    return (open(shipped_data()).readline().replace(",stack_version,", ",").replace(",dp,", ",")
            .replace(",requests,poll_steps,token_budget,max_batch,kv_memory_fraction,", ",")
            .replace(",lengths,p99_ttft_ms,p99_tpot_ms,chunked_prefill", "")
            .replace(",draft_model,tree_tokens,acceptance_rate", "")
            .replace(",compiled_batch,compiled_context,compiled_prompt", "").replace(",dp_balance", "")
            .replace(",draft_kv_budget", "").replace(",allreduce_fusion", "").replace(",prefill_tp,prefill_groups", ""))


def write_rows(path, *rows: str):
    """A measurements CSV at ``path``: the header of :func:`validation_header` and ``rows``."""
    path.write_text(validation_header() + "\n".join(rows) + "\n")
    return path


def validate_rows(tmp_path, *rows: str):
    """``roofline validate`` on ``rows`` written as a measurements CSV."""
    from roofline.evidence.validate import read_rows, validate
    return validate(read_rows(write_rows(tmp_path / "rows.csv", *rows)))


#: The type check runs beside the suite: started when the suite collects its test, in its own process (a second
#: core does it while the tests run on the first), and the test waits for its answer.
_MYPY: dict[str, subprocess.Popen] = {}
MYPY_TEST = "test_package_is_clean_under_mypy"


def pytest_collection_modifyitems(session, config, items):
    import importlib.util
    if any(item.name == MYPY_TEST for item in items) and importlib.util.find_spec("mypy") is not None:
        _MYPY["run"] = subprocess.Popen([sys.executable, "-m", "mypy"], cwd=Path(__file__).resolve().parents[1],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def mypy_run():
    """The type check started at collection (None when mypy is not installed)."""
    return _MYPY.get("run")


def pytest_sessionfinish(session, exitstatus):
    run = _MYPY.pop("run", None)
    if run is not None and run.poll() is None:
        run.kill()
