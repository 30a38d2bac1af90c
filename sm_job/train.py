"""Training entry point: the same script as one process, under torchrun, and as a SageMaker training job.

    python sm_job/train.py --steps 20                              # one process (CPU, or GPU 0)
    torchrun --nproc_per_node 2 sm_job/train.py --steps 20         # DDP: gloo on CPU, nccl on GPUs
    (SageMaker runs it under torchrun on every host; see sm_job/launch.py)

Hyperparameters are command-line options (sm_job/hyperparameters.py); the data is --data, else the
SageMaker 'train' channel, else a generated synthetic set. The model goes to SM_MODEL_DIR (rank 0),
step logs, summaries and traces to SM_OUTPUT_DATA_DIR (./runs/sm_job/ outside SageMaker).

In the job's source directory this file is copied to the root (SageMaker wants the entry point
there), beside custom_op/, datasets/, profiling/ and sm_job/; in the repository it sits in sm_job/.
Either way it puts the folder holding those packages first on sys.path.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _code_root() -> str:
    for root in (_HERE, os.path.dirname(_HERE)):
        if all(os.path.isdir(os.path.join(root, pkg)) for pkg in ("sm_job", "custom_op", "datasets", "profiling")):
            return root
    raise RuntimeError(f"cannot find custom_op/, datasets/, profiling/ and sm_job/ beside {__file__} or one level up")


_ROOT = _code_root()
# Python put this script's folder first on sys.path; in the repository that is sm_job/ itself, whose
# modules must not be importable as top-level names. The root holding the packages replaces it.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _HERE:
    sys.path.pop(0)
sys.path.insert(0, _ROOT)

import shlex  # noqa: E402
import time  # noqa: E402

from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402


@record  # under torchrun: the exception and its traceback go into the error file the agent reports
def main(argv=None) -> int:
    from sm_job import distributed, extension, hyperparameters, training
    from sm_job.env import read_job_env

    argv = sys.argv[1:] if argv is None else argv
    job = read_job_env()
    args = hyperparameters.parse(argv, job.hyperparameters)
    ranks = distributed.ranks_from_env()
    host = job.current_host or os.uname().nodename
    prefix = f"[sm_job rank {ranks.rank}/{ranks.world_size} {host}]"

    def log(msg: str) -> None:
        # One write per line: the ranks share torchrun's stdout, and print() writes the newline apart.
        sys.stdout.write(f"{prefix} {msg}\n")
        sys.stdout.flush()

    failure = args.inject_failure
    if failure is not None and failure[0] == ranks.rank and failure[1] == "start":
        time.sleep(failure[2])
        raise training.InjectedFailure(f"injected failure on rank {ranks.rank} at start-up (--inject-failure)")

    if args.workers is None:
        args.workers = training.default_workers(job.num_cpus, ranks)
    cache = extension.choose_build_cache(args.build_cache_dir, job)
    if ranks.rank == 0:
        log(
            f"sagemaker={job.in_sagemaker} hosts={job.hosts or [host]} gpus={job.num_gpus} "
            f"model_dir={job.model_dir} output_data_dir={job.output_data_dir} build_cache={cache or 'default'}"
        )
    device = distributed.choose_device(args.device, ranks, job.num_gpus)

    # Before the process group and the DataLoader: one rank per host compiles under custom_op's file
    # lock while the others wait for it; workers forked later inherit the loaded library.
    if args.pipeline != "pil":
        ext = extension.load_extension(cache, args.pipeline)
        log(
            f"custom_op {ext['kind']} library {ext['path']} (compiled here: {ext.get('built', 'no')}, "
            f"import took {ext['seconds']} s)"
        )
    else:
        ext = {"kind": "not used (pil pipeline)"}
        if cache is not None:
            os.environ[extension.CACHE_ENV] = cache

    data_dir = training.resolve_data(args, job.train_dir, ranks)
    backend = distributed.init_process_group(ranks, device, args.dist_timeout_s)
    try:
        log(
            f"device {device}, backend {backend or 'none (single process)'}, data {data_dir}, "
            f"pipeline {args.pipeline}, {args.workers} DataLoader workers, batch {args.batch_size}"
        )
        started = time.perf_counter()
        summary = training.train(
            args,
            data_dir=data_dir,
            model_dir=job.model_dir,
            output_data_dir=job.output_data_dir,
            ranks=ranks,
            device=device,
            extension=ext,
            log=log,
            command=shlex.join([sys.executable, *sys.argv]),
        )
        log(
            f"done: {args.steps} steps in {time.perf_counter() - started:.1f} s, step p50 "
            f"{summary['phases_s']['total']['p50']:.3f} s, {summary['images_per_s']:.1f} images/s on this rank"
        )
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
