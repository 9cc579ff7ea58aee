#!/usr/bin/env python3
"""All-reduce bus bandwidth over message sizes, as nccl-tests' all_reduce_perf measures it.

Runs on the box with the container's ML stack (torch.distributed: NCCL on GPUs, gloo on CPU),
so it lives in pipeline/, not among the stdlib-only probes. Started without worker variables
it is the launcher: it picks a free port, starts one process per rank and relays rank 0's
JSON lines. (torchrun --master-port 0 hangs, so the ranks are started here.)

Per size: time = mean seconds per all-reduce over --iters calls after --warmup calls, the
slowest rank's; algbw = bytes / time; busbw = algbw * 2(n-1)/n (nccl-tests' definition for
all-reduce, comparable across rank counts). A one-off correctness check per size sets
`ok` (every rank contributes rank+1; the sum must be n(n+1)/2).

Output lines:
  {"type": "start", "backend", "world_size", "device", "torch", "dtype", "iters", "warmup"}
  {"type": "row", "size", "count", "dtype", "time_s", "algbw", "busbw", "ok"}
  {"type": "end"}  |  {"type": "error", "message"}
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}
WORKER_FLAG = "--worker"
DEFAULT_SIZES = [(4 << 10) << i for i in range(17)]  # 4K..256M, doubling


def parse_size(text):
    """'4K', '4KB', '1.5M', '4096' -> bytes (binary units, as nccl-tests)."""
    t = text.strip().upper()
    if t.endswith("B"):
        t = t[:-1]
    unit = t[-1] if t and t[-1] in "KMG" else ""
    number = t[: len(t) - len(unit)]
    try:
        value = int(float(number) * UNITS[unit])
    except ValueError:
        raise ValueError(f"not a message size: {text!r}") from None
    if value <= 0:
        raise ValueError(f"message size must be positive: {text!r}")
    return value


def emit(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------ launcher


def launch(args, argv):
    port = free_port()
    procs, logs = [], []
    for rank in range(args.ranks):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.ranks),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        log = tempfile.TemporaryFile()
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), WORKER_FLAG, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
            stderr=log, env=env))

    def relay():
        assert procs[0].stdout is not None
        for raw in procs[0].stdout:
            sys.stdout.write(raw.decode("utf-8", "replace"))
            sys.stdout.flush()

    relayer = threading.Thread(target=relay, daemon=True)
    relayer.start()
    deadline = time.monotonic() + args.timeout
    try:
        while True:  # until a rank fails, all are done, or the deadline
            failed = next((r for r, p in enumerate(procs) if p.poll() not in (None, 0)), None)
            if failed is not None or all(p.poll() is not None for p in procs) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        relayer.join(5)
    if failed is None and all(p.returncode == 0 for p in procs):
        return 0
    if failed is None:
        emit({"type": "error", "message": f"timed out after {args.timeout:g}s"})
        return 1
    logs[failed].seek(0)
    tail = [ln for ln in logs[failed].read().decode("utf-8", "replace").splitlines() if ln.strip()]
    last = tail[-1] if tail else "no stderr"
    emit({"type": "error", "message": f"rank {failed} exited {procs[failed].returncode}: {last}",
          "stderr": tail[-20:]})
    return 1


# -------------------------------------------------------------------------------------- worker


def worker(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    backend = args.backend
    if backend == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        backend = "nccl" if gpus >= world else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    dtype = getattr(torch, args.dtype)
    elem = DTYPES[args.dtype]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    if rank == 0:
        emit({"type": "start", "backend": backend, "world_size": world, "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dtype": args.dtype, "iters": args.iters,
              "warmup": args.warmup})
    for size in args.sizes:
        count = max(1, size // elem)
        check = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        dist.all_reduce(check)
        sync()
        ok = bool(torch.all(check == world * (world + 1) / 2).item())
        del check
        buf = torch.zeros(count, dtype=dtype, device=device)  # zeros stay finite however often summed
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        sync()
        elapsed = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64,
                               device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        del buf
        if rank == 0:
            t = float(elapsed.item())
            nbytes = count * elem
            algbw = nbytes / t if t > 0 else 0.0
            emit({"type": "row", "size": nbytes, "count": count, "dtype": args.dtype,
                  "time_s": t, "algbw": algbw, "busbw": algbw * 2 * (world - 1) / world,
                  "ok": bool(flag.item())})
    if rank == 0:
        emit({"type": "end"})
    dist.destroy_process_group()
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2, help="processes (one per GPU with NCCL)")
    p.add_argument("--sizes", default=None,
                   help="comma-separated message sizes in bytes, K/M/G suffixes allowed "
                   "(default 4K..256M, doubling)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole sweep")
    args = p.parse_args(argv)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else DEFAULT_SIZES
    except ValueError as exc:
        p.error(f"--sizes: {exc}")
    if args.ranks < 1 or args.iters < 1 or args.warmup < 0:
        p.error("--ranks and --iters must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == WORKER_FLAG:
        return worker(parse_args(argv[1:]))
    return launch(parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
