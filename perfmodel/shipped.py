"""Where the data files perfmodel ships with lie: in the repository checkout (``pip install -e .``, CI), or,
in an installed wheel, in the copies the build put inside the package (``setup.py``'s build step copies
``SHIPPED_PATHS`` to ``perfmodel/_shipped/``, keeping their paths relative to the repository root).

Only this module knows the two layouts; the GPU catalog and the default calibrated profile ask it for
their folder.
"""
from __future__ import annotations

import shutil
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
#: inside an installed wheel
WHEEL_ROOT = PACKAGE_DIR / "_shipped"
#: what the wheel carries, relative to the repository root: the GPU catalog, the default calibrated profile
#: and the collectives fit its provenance points to (the measured data and the fitting scripts stay in the
#: repository)
SHIPPED_PATHS = ("hardware_profiles", "calibration/default_profile.yaml", "calibration/collectives_fit.yaml")


def is_checkout(root: Path = CHECKOUT_ROOT) -> bool:
    """A repository checkout (not a site-packages folder): the project file beside the GPU catalog."""
    return (root / "pyproject.toml").is_file() and (root / "hardware_profiles").is_dir()


def data_root() -> Path:
    """The folder the shipped paths are relative to: the checkout's root, else the wheel's copies."""
    return CHECKOUT_ROOT if is_checkout() else WHEEL_ROOT


def copy_shipped(source_root: Path, target: Path) -> list[Path]:
    """Copy ``SHIPPED_PATHS`` from a checkout's root to ``target`` (a wheel's ``perfmodel/_shipped``), keeping
    their relative paths; the files written. A folder gives its YAML files. ``target`` is emptied first (a
    rebuilt wheel carries no file the checkout has dropped since)."""
    shutil.rmtree(target, ignore_errors=True)
    written = []
    for rel in SHIPPED_PATHS:
        src = Path(source_root) / rel
        files = sorted(src.glob("*.yaml")) if src.is_dir() else [src]
        folder = Path(target) / rel if src.is_dir() else (Path(target) / rel).parent
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copyfile(file, folder / file.name)
            written.append(folder / file.name)
    return written


def package_version() -> str:
    """The installed distribution's version (its metadata), or 'unknown' for a package run from a path
    without it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perfmodel")
    except PackageNotFoundError:
        return "unknown"
