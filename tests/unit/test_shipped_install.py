"""An installed wheel (``pip install .``, not only ``pip install -e .``) carries the GPU catalog and the
default calibrated profile, and gives the answers the checkout gives (perfmodel/shipped.py, setup.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from perfmodel import shipped

ROOT = shipped.CHECKOUT_ROOT
ESTIMATE = ["estimate", "--model", "llama3-70b", "--gpu", "h800-sxm5-80gb", "--gpus", "512", "--global-batch", "512",
            "--seq-len", "32768", "--tp", "8", "--pp", "4", "--cp", "2", "--json"]
RUN = "import sys; from perfmodel.cli import main; sys.argv = ['perfmodel', *sys.argv[1:]]; main()"


def _perfmodel(args: list[str], cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", RUN, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_checkout_is_read_in_place():
    assert shipped.is_checkout()
    assert shipped.data_root() == ROOT
    for rel in shipped.SHIPPED_PATHS:
        assert (ROOT / rel).exists(), rel


def test_a_site_packages_folder_is_not_a_checkout(tmp_path):
    (tmp_path / "hardware_profiles").mkdir()  # a stray folder of that name beside an installed package
    assert not shipped.is_checkout(tmp_path)


def _installed_layout(tmp_path: Path) -> Path:
    """The package as a wheel lays it out: perfmodel/ alone in site-packages, the shipped files in _shipped."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "perfmodel", site / "perfmodel",
                    ignore=shutil.ignore_patterns("__pycache__", "_shipped"))
    written = shipped.copy_shipped(ROOT, site / "perfmodel" / "_shipped")
    assert {p.relative_to(site / "perfmodel" / "_shipped").parts[0] for p in written} == {"hardware_profiles",
                                                                                            "calibration"}
    return site


def test_a_rebuilt_wheel_carries_no_file_the_checkout_dropped(tmp_path):
    target = tmp_path / "_shipped"
    (target / "hardware_profiles").mkdir(parents=True)
    (target / "hardware_profiles" / "dropped-gpu.yaml").write_text("name: dropped\n")  # an earlier build's
    shipped.copy_shipped(ROOT, target)
    assert not (target / "hardware_profiles" / "dropped-gpu.yaml").exists()
    assert (target / "hardware_profiles" / "h100-sxm5-80gb.yaml").is_file()


def test_an_installed_package_answers_as_the_checkout(tmp_path):
    site = _installed_layout(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    installed = _perfmodel(ESTIMATE, work, site)
    checkout = _perfmodel(ESTIMATE, work, ROOT)
    assert installed.returncode == 0, installed.stderr
    assert installed.stderr == "" and checkout.returncode == 0
    assert installed.stdout == checkout.stdout  # same catalog GPU, same fitted profile
    probe = _perfmodel(["--help"], work, site)
    assert probe.returncode == 0
    said = _perfmodel(["--version"], work, site)
    assert said.returncode == 0 and len(said.stdout.splitlines()) == 1
    assert f"GPU catalog {site / 'perfmodel' / '_shipped' / 'hardware_profiles'};" in said.stdout
    assert "_shipped/calibration/default_profile.yaml of 20" in said.stdout
    listing = subprocess.run([sys.executable, "-c", "from perfmodel.catalog import gpu_names, PROFILES_DIR; "
                              "print(PROFILES_DIR); print(len(gpu_names()))"], cwd=work, capture_output=True,
                             text=True, env={"PYTHONPATH": str(site)}, check=True).stdout.split()
    assert Path(listing[0]) == site / "perfmodel" / "_shipped" / "hardware_profiles"
    assert int(listing[1]) == len(list((ROOT / "hardware_profiles").glob("*.yaml")))


def test_an_install_missing_its_catalog_says_so_in_one_line(tmp_path):
    site = _installed_layout(tmp_path)
    shutil.rmtree(site / "perfmodel" / "_shipped" / "hardware_profiles")
    result = _perfmodel(ESTIMATE, tmp_path, site)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len([ln for ln in lines if ln.startswith("error:")]) == 1 and "Traceback" not in result.stderr
    assert "GPU catalog" in result.stderr and "reinstall" in result.stderr


def test_the_built_wheel_carries_the_shipped_files(tmp_path):
    """The real build (setup.py's build step through pip, with build isolation: needs the package index
    .ci/run installs from)."""
    source = tmp_path / "source"  # a copy: setuptools builds in the tree it is given
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info",
                                                                "__pycache__", "_shipped", "tests"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", str(source), "--no-deps", "-w",
                            str(tmp_path / "dist")], capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and ("No matching distribution" in build.stderr
                                  or "Could not find a version" in build.stderr):
        pytest.skip("no package index to fetch the build backend from")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("perfmodel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in shipped.SHIPPED_PATHS:
        src = ROOT / rel
        for file in (sorted(src.glob("*.yaml")) if src.is_dir() else [src]):
            assert f"perfmodel/_shipped/{file.relative_to(ROOT).as_posix()}" in names


def test_version_names_the_release_and_the_data_it_reads(monkeypatch, capsys):
    from importlib.metadata import version

    from cli_helpers import run_cli

    code, out, err = run_cli(monkeypatch, capsys, "--version")
    assert code == 0 and err == ""
    assert out.startswith(f"perfmodel {version('perfmodel')} (GPU catalog {ROOT / 'hardware_profiles'}; ")
    assert str(ROOT / "calibration" / "default_profile.yaml") in out
