"""A non-editable install (a real wheel build) carries the specs, presets, profile and validation data.

Works from inside any virtual environment: the wheel is built with the running interpreter's hatchling
(the test extra installs it), installed with ``pip --target`` into a scratch folder, and imported from there
by the running interpreter, whose numpy, attrs and rich it uses; nothing is downloaded.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_install_ships_specs_and_presets(tmp_path):
    pytest.importorskip("hatchling")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                                             ".pytest_cache", ".ruff_cache"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(src)], check=True, capture_output=True, text=True)
    shutil.rmtree(src)  # the install must not depend on the source tree
    probe = ("import roofline, roofline.specs.devices as d\n"
             "print(roofline.__file__); print(d.specs_dir()); print(len(roofline.list_devices()));"
             "print(len(roofline.list_models())); print(roofline.load_device('corsair').get('sram.bandwidth'));"
             "print(roofline.DEFAULT_PARAMS.step_overhead_s > 0)\n"
             "from roofline.evidence.validate import read_rows, shipped_data\n"
             "print(shipped_data()); print(len(read_rows(shipped_data())))\n"
             "print(roofline.load_device('h200-sxm').idle_w)")   # cites our measurement file, which must ship
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path,
                         env=env).stdout.split()
    assert out[0].startswith(str(site)), out[0]
    assert out[1].startswith(str(site)) and out[1].endswith("roofline/hardware_specs")
    assert int(out[2]) >= 28 and int(out[3]) >= 15
    assert float(out[4]) == 150e12 and out[5] == "True"
    assert out[6].startswith(str(site)) and int(out[7]) >= 1500   # the published measurements ship
    assert out[8] == "126.0"
    # the command validates with the shipped calibration (on the 24 rows of our own H200 file, which ships too:
    # the 1,581 published rows take a minute here and prove nothing more about packaging)
    assert (Path(out[6]).parent / "kept.csv").is_file()   # the kept set (never fitted) ships beside them
    ours = Path(out[6]).parent / "h200_measured.csv"
    cli = subprocess.run([sys.executable, "-m", "roofline", "validate", "--data", str(ours), "--json"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["summary"]["overall"]["n"] >= 20
