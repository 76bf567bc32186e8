"""Builds nexar._nexar with the project's CMake for `pip install .` (see
pyproject.toml): configure a private build tree with NEXAR_PYTHON_STATIC=ON,
build the target nexar_python, copy the extension into the wheel."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tmp = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(tmp, exist_ok=True)
        subprocess.check_call(["cmake", "-S", ROOT, "-B", tmp, "-DCMAKE_BUILD_TYPE=Release",
                               "-DBUILD_TESTING=OFF", "-DNEXAR_PYTHON=ON",
                               "-DNEXAR_PYTHON_STATIC=ON", f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", tmp, "--target", "nexar_python", "-j",
                               str(min(os.cpu_count() or 1, 4))])
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "python", "nexar", "_nexar.abi3.so"), dest)


setup(
    ext_modules=[Extension("nexar._nexar", sources=[], py_limited_api=True)],
    cmdclass={"build_ext": CMakeBuild},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
