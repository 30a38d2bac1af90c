"""Where a batched GPU call's host CPU goes, for our CUDA decoder's batches of 224x224 windows from
photos as they come (decoded in chunks) and prepared for random access, in ordinary and in pinned
memory: per thread (the calling thread, our helper threads, the CUDA driver's threads) and per step of
the call (its torch.profiler spans, on the calling thread).

    python bench/bench_gpu_host_time.py [--imagenet DIR] [--files originals,prepared] [--batches 64,256]
                                        [--calls 300] [--rounds 5] [--out FILE]

Calls run one after another, as in bench/bench_gpu.py's rows of one call at a time. Per-thread CPU
time comes from /proc/self/task/*/schedstat (Linux). The helper threads do each image's share of the
host work (its list of segments, its descriptor and, for a file in ordinary memory, the copy of its
bytes into the upload buffer), with the calling thread, which also queues each part; so the helper
threads' time in ordinary memory less theirs in pinned memory is about the copy. The spans are wall
time on the calling thread, waits included (gpu_queue waits for the images of each part, gpu_finish
for the decode kernels), measured in separate calls under torch.profiler, which costs some time of its
own; "outside the operator" is the Python wrapper and the operator's argument and result conversion.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402
import torch  # noqa: E402

import custom_op  # noqa: E402

WINDOW = 224
BATCHES_PER_CONFIG = 10  # distinct batches a config cycles through
THREAD_GROUPS = ("calling thread", "helper threads", "CUDA driver threads", "other threads")
# The operator and its steps (docs/design/gpu-backend.md lists the spans), in the order they run.
SPANS = (
    ("custom_op::decode_jpegs_cuda", "the operator"),
    ("custom_op::gpu_plan", "operator: plan (headers, windows)"),
    ("custom_op::gpu_outputs", "operator: the outputs' allocation"),
    ("custom_op::gpu_claim", "operator: claim (each file's tables and region)"),
    ("custom_op::gpu_queue", "operator: queue"),
    ("custom_op::gpu_segments_decode", "queue: our decoder's layout and parts"),
    ("custom_op::gpu_segments_part", "queue: its parts (with the waits for their images)"),
    ("custom_op::gpu_finish", "operator: finish (the wait for the decodes)"),
    ("custom_op::cpu_fallback", "operator: CPU fallback"),
    ("custom_op::gpu_results", "operator: results"),
)
CALL_SPAN = "bench::call"


def thread_times() -> dict[int, tuple[str, int]]:
    """{thread id: (name, CPU nanoseconds so far)} for this process's threads (Linux)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, ns)
    return out


def group_of(tid: int, name: str, caller: int) -> str:
    if tid == caller:
        return "calling thread"
    if name == "custom_op_host":  # custom_op/csrc/cuda/helper_threads.cpp names them so
        return "helper threads"
    if name.startswith("cuda"):
        return "CUDA driver threads"
    return "other threads"


def cpu_by_group(before: dict, after: dict, caller: int) -> dict[str, float]:
    """CPU seconds each group of threads spent between two thread_times() snapshots (a thread that
    ended meanwhile is not counted; one that started counts from zero)."""
    spent = dict.fromkeys(THREAD_GROUPS, 0.0)
    for tid, (name, ns) in after.items():
        spent[group_of(tid, name, caller)] += (ns - before.get(tid, (name, 0))[1]) / 1e9
    return spent


def decode(batches, i: int):
    data, lists = batches[i % len(batches)]
    return custom_op.decode_and_crop_jpegs(data, *lists, device="cuda")


def measure(batches, calls: int, rounds: int, caller: int):
    """One row: images/s, host CPU ms per image, {thread group: CPU ms per call} (of the round whose host
    CPU is the median), {span: wall us per call}."""
    batch = len(batches[0][0])
    for i in range(20):
        decode(batches, i)
    torch.cuda.synchronize()
    measured = []
    for _ in range(rounds):
        before, cpu0, wall0 = thread_times(), time.process_time(), time.perf_counter()
        for i in range(calls):
            decode(batches, i)
        torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        measured.append((cpu, wall, cpu_by_group(before, thread_times(), caller)))
    cpu, wall, groups = sorted(measured, key=lambda m: m[0])[len(measured) // 2]
    per_call = {g: s / calls * 1e3 for g, s in groups.items()}

    profiled = max(calls // 4, 1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(profiled):
            with torch.profiler.record_function(CALL_SPAN):
                decode(batches, i)
    torch.cuda.synchronize()
    totals = {e.key: e.cpu_time_total for e in prof.key_averages()}
    spans = {key: totals.get(key, 0.0) / profiled for key in [CALL_SPAN] + [k for k, _ in SPANS]}
    return batch * calls / wall, cpu / calls / batch * 1e3, per_call, spans


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_imagenet_option(parser)
    parser.add_argument("--photos", type=int, default=200, help="photos taken from DIR, or generated")
    parser.add_argument(
        "--files", default="originals,prepared", help="originals, prepared (prepare_jpeg's copies) or both"
    )
    parser.add_argument("--batches", default="64,256", help="batch sizes, comma-separated")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per round (a quarter more profiled)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per row: the one of median host CPU is shown")
    parser.add_argument("--machine", help="what the report calls this machine (default: its GPU and CPU)")
    common.add_report_options(parser)
    args = parser.parse_args()
    reason = custom_op.gpu.unavailable_reason()
    if reason is not None:
        sys.exit(f"bench_gpu_host_time: needs the GPU backend ({reason})")

    kinds = args.files.split(",")
    if not kinds or any(k not in ("originals", "prepared") for k in kinds):
        sys.exit(f"bench_gpu_host_time: --files takes originals and prepared, not {args.files!r}")
    originals = [data for _, data in common.spaced_photos(args.imagenet, args.photos)]
    files = {"originals": originals}
    if "prepared" in kinds:
        files["prepared"] = [custom_op.prepare_jpeg(f) for f in originals]
    windows = common.random_windows(originals, WINDOW, seed=0)
    caller = threading.get_native_id()
    report = common.Report(
        "Where a GPU call's host CPU goes",
        machine=args.machine or common.gpu_description(),
        commit=args.commit,
        details={
            "files": f"{common.photos_detail(args.imagenet, len(originals))}: "
            + " and ".join(
                {"originals": "as they come", "prepared": "prepared for random access (custom_op.prepare_jpeg)"}[k]
                for k in kinds
            ),
            "calls": f"custom_op.decode_and_crop_jpegs(..., device='cuda') on batches of {WINDOW}x{WINDOW} windows, "
            f"one after another, {BATCHES_PER_CONFIG} distinct batches in turn; 20 untimed, then {args.rounds} "
            f"rounds of {args.calls} timed calls (each row shows the round whose host CPU is the median), then "
            f"{args.calls // 4} more under torch.profiler for the spans",
            "versions": common.versions(),
        },
    )

    by_thread, spans = [], {}
    for kind in kinds:
        for batch in (int(b) for b in args.batches.split(",")):
            for memory in ("ordinary", "pinned"):
                batches = common.window_batches(files[kind], windows, batch, BATCHES_PER_CONFIG, memory)
                name = f"{kind}, batch {batch}, {memory} memory"
                images_per_s, cpu_ms, per_call, spans[name] = measure(batches, args.calls, args.rounds, caller)
                by_thread.append(
                    [name, f"{images_per_s:,.0f}", f"{cpu_ms:.4f}", *(f"{per_call[g]:.3f}" for g in THREAD_GROUPS)]
                )

    report.heading("CPU time per call, by thread")
    report.table(
        ["files, batch", "images/s", "host CPU ms/image", *(f"{g}, ms per call" for g in THREAD_GROUPS)],
        by_thread,
    )
    report.heading("The calling thread's steps (torch.profiler spans, wall microseconds per call)")
    names = list(spans)
    outside = {n: spans[n][CALL_SPAN] - spans[n]["custom_op::decode_jpegs_cuda"] for n in names}
    rows = [["the call", *(f"{spans[n][CALL_SPAN]:.0f}" for n in names)]]
    rows.append(["outside the operator", *(f"{outside[n]:.0f}" for n in names)])
    rows += [[label, *(f"{spans[n][key]:.0f}" for n in names)] for key, label in SPANS]
    report.table(["step", *names], rows)
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
