"""The suite must test the package of the build tree, never an installed
copy: ctest sets NEXAR_PY_BUILD (the build's python/ folder)."""
import os

import nexar

_want = os.environ.get("NEXAR_PY_BUILD")
if _want:
    _got = os.path.realpath(os.path.dirname(nexar.__file__))
    assert _got == os.path.realpath(os.path.join(_want, "nexar")), (
        f"testing {_got}, not the build tree's package in {_want}")
