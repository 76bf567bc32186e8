# Makes `import numpy` fail, so the nexar test suite runs as on a machine
# without numpy (bytearray, array.array and memoryview buffers only).
import sys


class _NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("numpy is blocked for this test run")
        return None


sys.meta_path.insert(0, _NoNumpy())
