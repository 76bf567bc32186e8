"""pytest setup for the torch backend tests: the built package (build/python,
or NEXAR_PYTHONPATH) and this folder on the path of the test and of every
process it starts (mp.spawn children, torchrun workers)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("NEXAR_PYTHONPATH") or os.path.join(HERE, "..", "..", "build", "python")
for p in (HERE, os.path.abspath(BUILD)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.path.abspath(BUILD)] +
                                           ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
# a dead rank is noticed within about a second and a half
os.environ.setdefault("NEXAR_HEARTBEAT_INTERVAL_MS", "200")
os.environ.setdefault("NEXAR_HEARTBEAT_TIMEOUT_MS", "1500")
