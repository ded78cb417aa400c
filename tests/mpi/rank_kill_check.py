#!/usr/bin/env python3
"""A rank killed mid-run ends the whole job with a message naming it, within a timeout.

Usage: rank_kill_check.py HEADCOUNT MPIEXEC

Starts `headcount attention --distributed ring` over 2 ranks on inputs that take seconds,
finds rank 1's process (its environment holds OMPI_COMM_WORLD_RANK=1, under this mpirun),
kills it with SIGKILL once the computation runs, and expects mpirun to end within 60 s,
non-zero, saying which rank died, with no output file left behind.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from mpi_processes import descendants, rank_of

cli, mpiexec = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TIMEOUT = 60


with tempfile.TemporaryDirectory() as tmp:
    rng = np.random.default_rng(1)
    # Long enough that the kill lands inside the ring on a fast idle host (16384 took 1.2 s there,
    # and the kill 1.5 s in came after it), short enough for a loaded 2-core CI host.
    n, heads, dim = 32768, 4, 64
    paths = []
    for name in ("q", "k", "v"):
        paths.append(os.path.join(tmp, name + ".npy"))
        np.save(paths[-1], rng.uniform(-1, 1, (1, n, heads, dim)).astype(np.float32))
    out = os.path.join(tmp, "out.npy")
    cmd = [mpiexec, "--oversubscribe", "-n", "2", cli, "attention", "--q", paths[0], "--k", paths[1], "--v",
           paths[2], "--out", out, "--distributed", "ring"]
    start = time.monotonic()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    victim = None
    while victim is None and time.monotonic() - start < TIMEOUT and job.poll() is None:
        victim = next((p for p in descendants(job.pid) if rank_of(p) == 1), None)
        time.sleep(0.05)
    if victim is None:
        print("FAIL: rank 1 never appeared", job.poll())
        sys.exit(1)
    time.sleep(1.5)  # past MPI_Init and the inputs' scatter: into the ring's computation
    killed_at = time.monotonic()
    try:
        os.kill(victim, signal.SIGKILL)
    except ProcessLookupError:
        print("FAIL: rank 1 had already ended before the kill (the job ran shorter than expected)")
        job.kill()
        sys.exit(1)
    try:
        stdout, stderr = job.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        job.kill()
        print(f"FAIL: the job still ran {TIMEOUT} s after rank 1 was killed (a hang)")
        sys.exit(1)
    took = time.monotonic() - killed_at
    text = stdout + stderr
    print(f"mpirun exited {job.returncode} {took:.2f} s after rank 1 (pid {victim}) was killed")
    print("\n".join(line for line in text.splitlines() if "rank" in line))
    ok = job.returncode != 0 and "rank 1" in text and not os.path.exists(out)
    print("rank_kill_check:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)
