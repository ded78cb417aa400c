#!/usr/bin/env python3
"""A rank that stops without dying ends the job through the watchdog, naming it.

Usage: rank_hang_check.py HEADCOUNT MPIEXEC

Starts `headcount train --parallel data --timeout 3` over 2 ranks on a run far longer than the
test, stops rank 1 with SIGSTOP once it trains (a process that neither runs nor dies: mpirun
sees nothing wrong), and expects the job to end non-zero within 60 s, with headcount's line
naming rank 1 as the one that did not reach the gradient all-reduce, and no checkpoint. Without
the watchdog the job waits forever (the test then fails at its 60 s).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time



def descendants(pid):
    """Every process below pid (as rank_kill_check.py finds them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(item.split(b"=")[1])
    except OSError:
        pass
    return None


cli, mpiexec = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
TIMEOUT = 60

with tempfile.TemporaryDirectory() as tmp:
    config = os.path.join(tmp, "run.json")
    with open(config, "w") as f:
        json.dump({"task": {"name": "copy", "seq_len": 16, "alphabet": 8},
                   "model": {"layers": 1, "d_model": 32, "heads": 2},
                   "train": {"steps": 10000000, "batch": 4, "log_every": 0}}, f)
    out = os.path.join(tmp, "ckpt")
    cmd = [mpiexec, "--oversubscribe", "-n", "2", cli, "train", "--config", config, "--threads", "1",
           "--quiet", "--out", out, "--parallel", "data", "--timeout", "3"]
    start = time.monotonic()
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    victim = None
    while victim is None and time.monotonic() - start < TIMEOUT and job.poll() is None:
        victim = next((p for p in descendants(job.pid) if rank_of(p) == 1), None)
        time.sleep(0.05)
    if victim is None:
        print("FAIL: rank 1 never appeared", job.poll())
        job.kill()
        sys.exit(1)
    time.sleep(1.5)  # past MPI_Init and the agreement: into the steps
    stopped_at = time.monotonic()
    try:
        os.kill(victim, signal.SIGSTOP)
    except ProcessLookupError:
        print("FAIL: rank 1 had ended before the stop")
        job.kill()
        sys.exit(1)
    try:
        stdout, stderr = job.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        job.kill()
        stdout, stderr = job.communicate()
        print(f"FAIL: the job still ran {TIMEOUT} s after rank 1 was stopped (a hang)")
        print(stderr[-2000:])
        sys.exit(1)
    finally:
        try:  # never leave a stopped process behind
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    took = time.monotonic() - stopped_at
    lines = [line for line in stderr.splitlines() if line.startswith("headcount: error")]
    print(f"mpirun exited {job.returncode} {took:.2f} s after rank 1 (pid {victim}) was stopped")
    print("\n".join(lines))
    ok = (job.returncode != 0 and len(lines) == 1
          and lines[0].startswith("headcount: error: rank 1 did not reach the gradient all-reduce of step")
          and not os.path.exists(out))
    print("rank_hang_check:", "ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)
