"""Build step: an installed wheel carries the GPU catalog and the default calibrated profile inside the
package (``perfmodel/_shipped/``), so ``pip install .`` works as ``pip install -e .`` does. The metadata is
in pyproject.toml; what is copied, and how, is ``perfmodel/shipped.py``'s."""
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _shipped_module():
    # loaded from its file: importing the package would import numpy at build time
    spec = importlib.util.spec_from_file_location("_perfmodel_shipped", ROOT / "perfmodel" / "shipped.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):  # an editable install reads the checkout itself
            _shipped_module().copy_shipped(ROOT, Path(self.build_lib) / "perfmodel" / "_shipped")


setup(cmdclass={"build_py": BuildPyWithData})
