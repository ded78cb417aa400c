#!/usr/bin/env python3
"""A rank that stops without dying ends the job through the watchdog, naming it.

Usage: rank_hang_check.py HEADCOUNT MPIEXEC

Two jobs over 2 ranks with `--timeout 3`: `headcount train --parallel data` on a run far longer
than the test, and `headcount attention --distributed ring` on inputs that take seconds. Stops
rank 1 with SIGSTOP once it works (a process that neither runs nor dies: mpirun sees nothing
wrong), and expects each job to end non-zero within 60 s, with one headcount line naming rank 1
as the one that did not reach the wait (the gradient all-reduce; a ring step or the gathering of
the outputs), and no output. Without the watchdog a job waits forever (the test then fails at its 60 s).
"""
import json
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


def stop_rank_1(cmd, expect_start, out):
    """Runs cmd, stops rank 1 1.5 s after it appears; True when the job ended as expected."""
    start = time.monotonic()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    victim = None
    while victim is None and time.monotonic() - start < TIMEOUT and job.poll() is None:
        victim = next((p for p in descendants(job.pid) if rank_of(p) == 1), None)
        time.sleep(0.05)
    if victim is None:
        print("FAIL: rank 1 never appeared", job.poll())
        job.kill()
        return False
    time.sleep(1.5)  # past MPI_Init and the agreement: into the work
    stopped_at = time.monotonic()
    try:
        os.kill(victim, signal.SIGSTOP)
    except ProcessLookupError:
        print("FAIL: rank 1 had ended before the stop")
        job.kill()
        return False
    try:
        stdout, stderr = job.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        job.kill()
        stdout, stderr = job.communicate()
        print(f"FAIL: the job still ran {TIMEOUT} s after rank 1 was stopped (a hang)")
        print(stderr[-2000:])
        return False
    finally:
        try:  # never leave a stopped process behind
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.monotonic() - stopped_at
    lines = [line for line in stderr.splitlines() if line.startswith("headcount: error")]
    print(f"{cmd[5]}: mpirun exited {job.returncode} {took:.2f} s after rank 1 (pid {victim}) was stopped")
    print("\n".join(lines))
    return (job.returncode != 0 and len(lines) == 1 and lines[0].startswith(expect_start)
            and not os.path.exists(out))


with tempfile.TemporaryDirectory() as tmp:
    config = os.path.join(tmp, "run.json")
    with open(config, "w") as f:
        json.dump({"task": {"name": "copy", "seq_len": 16, "alphabet": 8},
                   "model": {"layers": 1, "d_model": 32, "heads": 2},
                   "train": {"steps": 10000000, "batch": 4, "log_every": 0}}, f)
    out = os.path.join(tmp, "ckpt")
    ok_train = stop_rank_1(
        [mpiexec, "--oversubscribe", "-n", "2", cli, "train", "--config", config, "--threads", "1",
         "--quiet", "--out", out, "--parallel", "data", "--timeout", "3"],
        "headcount: error: rank 1 did not reach the gradient all-reduce of step", out)

    rng = np.random.default_rng(1)
    n, heads, dim = 32768, 4, 64  # rank_kill_check.py's: seconds of work
    paths = []
    for name in ("q", "k", "v"):
        paths.append(os.path.join(tmp, name + ".npy"))
        np.save(paths[-1], rng.uniform(-1, 1, (1, n, heads, dim)).astype(np.float32))
    out = os.path.join(tmp, "out.npy")
    ok_ring = stop_rank_1(
        [mpiexec, "--oversubscribe", "-n", "2", cli, "attention", "--q", paths[0], "--k", paths[1],
         "--v", paths[2], "--out", out, "--distributed", "ring", "--threads", "1", "--timeout", "3"],
        # Where rank 0 waits depends on when the stop lands: a ring step's K/V blocks, or the
        # gathering of the outputs (rank 1's block having gone out before it stopped).
        "headcount: error: rank 1 did not reach the ", out)

    ok = ok_train and ok_ring
    print("rank_hang_check:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)
