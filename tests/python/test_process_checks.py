"""Checks that need their own interpreter: buffer pinning under
PYTHONMALLOC=debug, and Ctrl-C (SIGINT) during blocked calls."""

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def test_buffer_pinning_under_pythonmalloc_debug():
    env = dict(os.environ, PYTHONMALLOC="debug", PYTHONDEVMODE="1")
    p = subprocess.run([sys.executable, os.path.join(HERE, "pin_worker.py")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "pinning ok" in p.stdout, p.stdout + p.stderr


def test_ctrl_c_wakes_blocked_calls_within_200_ms():
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "sigint_worker.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lat = []
        for phase in ("ready wait", "ready barrier", "ready probe", "ready join"):
            line = p.stdout.readline().strip()
            assert line == phase, line + p.stdout.read()
            time.sleep(0.5)  # well inside the blocking call
            t = time.monotonic()
            p.send_signal(signal.SIGINT)
            line = p.stdout.readline().split()
            assert line and line[0] == "interrupted", line
            lat.append(float(line[1]) - t)
        rest = p.stdout.read()
        assert p.wait(30) == 0 and "sigint ok" in rest, rest
        print("KeyboardInterrupt latencies (s):", [round(x, 4) for x in lat])
        assert max(lat) < 0.2, f"KeyboardInterrupt after {lat} s"
    finally:
        p.kill()
