"""A non-editable `pip install .` into a fresh virtual environment finds the specs and presets."""

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_install_ships_specs_and_presets(tmp_path):
    pytest.importorskip("hatchling")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build"))
    env_dir = tmp_path / "venv"
    # system site-packages supply numpy/attrs/rich/hatchling offline; the package itself is installed for real
    venv.create(env_dir, with_pip=True, system_site_packages=True)
    py = env_dir / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
                   check=True, capture_output=True, text=True)
    shutil.rmtree(src)  # the install must not depend on the source tree
    probe = ("import roofline, roofline.hardware as h, roofline.configs as c\n"
             "print(roofline.__file__); print(h.specs_dir()); print(len(roofline.list_devices()));"
             "print(len(roofline.list_models())); print(roofline.load_device('corsair').get('sram.bandwidth'))")
    out = subprocess.run([str(py), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(env_dir)), out[0]
    assert out[1].startswith(str(env_dir)) and out[1].endswith("roofline/hardware_specs")
    assert int(out[2]) >= 28 and int(out[3]) >= 15
    assert float(out[4]) == 150e12
