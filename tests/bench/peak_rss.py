#!/usr/bin/env python3
"""Runs a command and reports its own peak RSS (VmHWM of that process only, not its
children) and wall time as JSON on fd 3, passing stdout/stderr through.

    peak_rss.py OUT.json CMD ARGS...
"""
import json, subprocess, sys, time

out, cmd = sys.argv[1], sys.argv[2:]
start = time.monotonic()
p = subprocess.Popen(cmd)
peak = 0
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.02)
with open(out, "w") as f:
    json.dump({"rc": p.returncode, "peak_rss_kib": peak, "seconds": time.monotonic() - start}, f)
sys.exit(p.returncode)
