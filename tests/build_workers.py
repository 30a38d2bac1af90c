"""Child-process side of test_build.py: processes that import custom_op at the same moment.

Run as a script (the test starts it in a fresh interpreter, so custom_op is not
loaded yet when it forks). Spawned children re-import this module by name, so it
must stay importable from the tests directory.

  python build_workers.py child     JPEG OUT BARRIER N   one importer
  python build_workers.py mixed     JPEG OUT BARRIER N_FORK N_SPAWN N_SUBPROCESS
  python build_workers.py dataloader JPEG OUT METHOD
"""

import os
import subprocess
import sys
import time

import torch  # imported before forking on purpose: that is what training scripts do

WINDOW = (4, 6, 16, 20)  # top, left, height, width
BARRIER_TIMEOUT_S = 300


def wait_at_barrier(barrier_dir: str, parties: int) -> None:
    """A file barrier: works across fork, spawn and plain subprocesses alike."""
    open(os.path.join(barrier_dir, f"ready-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + BARRIER_TIMEOUT_S
    while sum(n.startswith("ready-") for n in os.listdir(barrier_dir)) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {barrier_dir}: fewer than {parties} processes arrived")
        time.sleep(0.01)


def decode_window(jpeg_path: str) -> torch.Tensor:
    import custom_op  # the first import in the process loads or builds the library

    with open(jpeg_path, "rb") as f:
        data = f.read()
    top, left, height, width = WINDOW
    return custom_op.decode_and_crop_jpeg(data, top, left, height, width)


def child(jpeg_path: str, out_dir: str, barrier_dir: str, parties: int) -> None:
    wait_at_barrier(barrier_dir, parties)
    out = decode_window(jpeg_path)
    torch.save(out, os.path.join(out_dir, f"result-{os.getpid()}.pt"))


def mixed(jpeg_path, out_dir, barrier_dir, n_fork, n_spawn, n_subprocess) -> int:
    parties = n_fork + n_spawn + n_subprocess
    args = (jpeg_path, out_dir, barrier_dir, parties)
    procs = []
    for method, count in (("fork", n_fork), ("spawn", n_spawn)):
        ctx = torch.multiprocessing.get_context(method)
        for _ in range(count):
            p = ctx.Process(target=child, args=args)
            p.start()
            procs.append(p)
    subs = [
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "child", *map(str, args)])
        for _ in range(n_subprocess)
    ]
    failures = 0
    for p in procs:
        p.join()
        failures += p.exitcode != 0
    for s in subs:
        failures += s.wait() != 0
    return failures


class WindowDataset(torch.utils.data.Dataset):
    def __init__(self, jpeg_path: str, length: int):
        self.jpeg_path = jpeg_path
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return decode_window(self.jpeg_path)


def dataloader(jpeg_path: str, out_dir: str, method: str) -> int:
    loader = torch.utils.data.DataLoader(
        WindowDataset(jpeg_path, 16), batch_size=2, num_workers=4, multiprocessing_context=method
    )
    batches = list(loader)
    assert "custom_op" not in sys.modules, "only the workers should have imported custom_op"
    torch.save(torch.cat(batches), os.path.join(out_dir, f"result-{os.getpid()}.pt"))
    return 0


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "child":
        child(rest[0], rest[1], rest[2], int(rest[3]))
    elif command == "mixed":
        sys.exit(mixed(rest[0], rest[1], rest[2], *map(int, rest[3:6])))
    elif command == "dataloader":
        sys.exit(dataloader(*rest))
    else:
        sys.exit(f"unknown command {command}")
