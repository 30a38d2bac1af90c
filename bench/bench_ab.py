"""Two checkouts of custom_op on one machine, their rounds interleaved: the batched decode of 224x224
windows from prepared photos, so that a change's effect shows through the machine's drift.

    python bench/bench_ab.py A B [--device cuda] [--imagenet DIR] [--batches 64,256]
                                 [--memory ordinary,pinned] [--rounds 6] [--calls 20] [--ahead N] [--out FILE]

A and B are checkout directories, or revisions of this repository (exported with git archive). Each
runs in a process of its own that imports its own custom_op (built from its sources on first use)
and prepares the photos with its own prepare_jpeg. Both processes stay up, and the rounds alternate
between them (A then B, then B then A, ...): one process measures while the other waits, so that a
slow spell of a shared machine falls on both alike. A round is, for every batch size and memory kind,
``--calls`` calls of custom_op.decode_and_crop_jpegs one after another (or, with ``--ahead N``, through
custom_op.decode_ahead with N of them decoding at once, as a training loop would run them): images/s,
and host CPU ms per image (the process's CPU time, all its threads). The report gives each checkout's median over the
rounds with its range, B's median over A's, the median (and range) of B over A within each pair of
rounds that ran back to back, which a machine's drift over the run disturbs least, and whether the two
checkouts' windows are the same bytes.

Without DIR (the photos in name order, every k-th for ``--photos`` of them) the photos are photo-like
images this script generates. The report is written only where ``--out`` says: it compares two states
of the code, which is not one of the product's results in bench/results/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    ROOT,
    Report,
    commit_description,
    cpu_description,
    random_windows,
    short_commit,
    spaced_photos,
    window_batches,
)

WINDOW = 224
BATCHES_PER_CONFIG = 10  # distinct batches a config cycles through (the photos, in turn)
PROTOCOL = "AB "  # the prefix of a worker's lines meant for the driver (anything else is its log)


def configs(args) -> list[tuple[int, str]]:
    return [(b, m) for b in args.batches for m in args.memory]


def config_name(batch: int, memory: str) -> str:
    return f"batch {batch}, {memory} memory"


# -- the worker: one checkout, driven over stdin/stdout


def worker(args) -> None:
    checkout = Path(args.worker).resolve()
    sys.path.insert(0, str(checkout))
    import torch

    import custom_op

    if not Path(custom_op.__file__).resolve().is_relative_to(checkout):
        raise SystemExit(f"bench_ab: imported {custom_op.__file__}, not the custom_op of {checkout}")
    if args.ahead and not hasattr(custom_op, "decode_ahead"):
        raise SystemExit(f"bench_ab: --ahead needs custom_op.decode_ahead, which {checkout} does not have")
    originals = [data for _, data in spaced_photos(args.imagenet, args.photos)]
    prepared = [custom_op.prepare_jpeg(f) for f in originals]
    windows = random_windows(originals, WINDOW, seed=0)
    cuda = args.device != "cpu"

    batches = {
        (batch, memory): window_batches(prepared, windows, batch, BATCHES_PER_CONFIG, memory)
        for batch, memory in configs(args)
    }

    def decode(item):
        return custom_op.decode_and_crop_jpegs(item[0], *item[1], device=args.device)

    def measure(key, calls: int) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        items = (batches[key][i % BATCHES_PER_CONFIG] for i in range(calls))
        if args.ahead:
            for _ in custom_op.decode_ahead(items, decode, depth=args.ahead, device=args.device):
                pass
        else:
            for item in items:
                decode(item)
        if cuda:
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return key[0] * calls / wall, cpu / (key[0] * calls) * 1e3

    # Warm-up (the first calls size buffers), and a digest of each row's first batch of windows.
    digests = {}
    for key in batches:
        measure(key, BATCHES_PER_CONFIG)
        out = decode(batches[key][0])
        digests[config_name(*key)] = hashlib.sha256(b"".join(t.cpu().numpy().tobytes() for t in out)).hexdigest()
    say({"ready": True, "custom_op": custom_op.__file__, "digests": digests})
    for line in sys.stdin:
        if line.strip() != "round":
            break
        say({config_name(*key): measure(key, args.calls) for key in batches})


def say(message: dict) -> None:
    print(PROTOCOL + json.dumps(message), flush=True)


# -- the driver


class Worker:
    """A worker process for one checkout."""

    def __init__(self, checkout: Path, args):
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(checkout)]
        command += ["--device", args.device, "--imagenet", args.imagenet, "--photos", str(args.photos)]
        command += ["--batches", ",".join(map(str, args.batches)), "--memory", ",".join(args.memory)]
        command += ["--calls", str(args.calls), "--ahead", str(args.ahead)]
        self.checkout = checkout
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ready = self.receive()

    def receive(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL) :])
            sys.stderr.write(line)
        raise SystemExit(f"bench_ab: the worker for {self.checkout} stopped (exit status {self.process.wait()})")

    def round(self) -> dict:
        self.process.stdin.write("round\n")
        return self.receive()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


def resolve(spec: str, scratch: Path) -> tuple[Path, str]:
    """(checkout directory, its description) of a directory or of a revision of this repository."""
    path = Path(spec)
    if (path / "custom_op" / "__init__.py").is_file():
        path = path.resolve()
        # (A folder inside another repository, such as an export under this one, is not that repository's HEAD.)
        try:
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
            own = top.returncode == 0 and Path(top.stdout.strip()).resolve() == path
        except OSError:
            own = False
        return path, f"{commit_description(path) if own else 'not a git checkout'} ({path})"
    try:
        sha = short_commit(ROOT, spec)
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit(f"bench_ab: {spec} is neither a checkout directory nor a revision of {ROOT}") from None
    target = Path(tempfile.mkdtemp(prefix=f"{sha}-", dir=scratch))  # (A and B may be one revision)
    archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target, f"{sha} ({spec})"


def spread(values: list[float], digits: int) -> str:
    """The median and the range: "1,234 (1,100-1,300)"."""
    fmt = f"{{:,.{digits}f}}"
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def machine_description(device: str) -> str:
    if device == "cpu":
        return cpu_description()
    import torch

    return f"{torch.cuda.get_device_name(torch.device(device))}; {cpu_description()}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", nargs="?", help="checkout directory or revision A (the baseline)")
    parser.add_argument("b", nargs="?", help="checkout directory or revision B (the change)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument("--imagenet", default=str(ROOT.parent / "shared" / "data" / "imagenet-sample"))
    parser.add_argument("--photos", type=int, default=200, help="photos taken from DIR, or generated")
    parser.add_argument("--batches", default="64,256", help="batch sizes, comma-separated")
    parser.add_argument("--memory", default=None, help="ordinary, pinned or both (default: both on CUDA)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per checkout")
    parser.add_argument("--calls", type=int, default=20, help="calls per batch size and memory kind in a round")
    parser.add_argument("--ahead", type=int, default=0, help="calls through custom_op.decode_ahead, N at once")
    parser.add_argument("--out", help="write the report to this .md file, and its data to the .json beside it")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.memory is None:
        args.memory = "ordinary" if args.device == "cpu" else "ordinary,pinned"
    args.memory = args.memory.split(",")
    if any(m not in ("ordinary", "pinned") for m in args.memory):
        parser.error("--memory takes ordinary, pinned or both, comma-separated")
    if "pinned" in args.memory and args.device == "cpu":
        parser.error("--memory pinned needs a CUDA device")
    if args.ahead < 0:
        parser.error("--ahead takes how many calls decode at once (0: one call after another)")
    if args.worker:
        worker(args)
        return
    if args.a is None or args.b is None:
        parser.error("name two checkouts (directories or revisions): A and B")

    with tempfile.TemporaryDirectory(prefix="bench_ab_") as scratch:
        (a_dir, a_text), (b_dir, b_text) = (resolve(spec, Path(scratch)) for spec in (args.a, args.b))
        workers = [Worker(a_dir, args), Worker(b_dir, args)]
        try:
            rounds: list[list[dict]] = [[], []]
            for r in range(args.rounds):
                for k in (0, 1) if r % 2 == 0 else (1, 0):
                    rounds[k].append(workers[k].round())
        finally:
            for w in workers:
                w.close()

    report = Report(
        "Two checkouts, rounds interleaved: batched decode of prepared photos",
        machine=machine_description(args.device),
        commit=f"A: {a_text}; B: {b_text}",
        details={
            "device": args.device,
            "custom_op imported": f"A: {workers[0].ready['custom_op']}; B: {workers[1].ready['custom_op']}",
            "photos": f"{args.photos} from {args.imagenet}"
            if Path(args.imagenet).is_dir()
            else f"{args.photos} generated",
            "each figure": f"the median of {args.rounds} rounds per checkout (range in brackets); a round: "
            f"{args.calls} calls per row, "
            + (f"through custom_op.decode_ahead, {args.ahead} at once" if args.ahead else "one after another")
            + ", 224x224 windows; rounds A B, B A, ... in turn",
            "paired": "B / A within each pair of rounds run back to back (A's round i, B's round i): "
            "their median (range in brackets)",
        },
    )
    same = all(workers[0].ready["digests"][n] == workers[1].ready["digests"][n] for n in workers[0].ready["digests"])
    report.text(f"windows identical in A and B: {same}")
    rows = []
    for batch, memory in configs(args):
        name = config_name(batch, memory)
        speed = [[r[name][0] for r in rounds[k]] for k in (0, 1)]
        host = [[r[name][1] for r in rounds[k]] for k in (0, 1)]
        ratio = statistics.median(speed[1]) / statistics.median(speed[0])
        speed_pairs = [b / a for a, b in zip(*speed)]
        host_pairs = [b / a for a, b in zip(*host)]
        rows.append(
            [
                name,
                spread(speed[0], 0),
                spread(speed[1], 0),
                f"{ratio:.3f}x",
                spread(speed_pairs, 3),
                spread(host[0], 4),
                spread(host[1], 4),
                spread(host_pairs, 3),
            ]
        )
    columns = ["batch", "A images/s", "B images/s", "B / A", "B / A, paired", "A host CPU ms/image"]
    report.table([*columns, "B host CPU ms/image", "B / A host CPU, paired"], rows)
    if args.out:
        report.write(args.out)


if __name__ == "__main__":
    main()
