"""The entry point's hyperparameters: command-line options, defaulted from the job's hyperparameters.

SageMaker passes hyperparameters both on the command line (`--batch-size 32`, as the toolkit and the
ModelTrainer driver do) and in SM_HPS / hyperparameters.json; the command line wins. Every option is
accepted with dashes or underscores (`--batch-size` or `--batch_size`), since a hyperparameter's key
becomes the option name as written.
"""

from __future__ import annotations

import argparse

from profiling.arg_types import image_size as _image_size
from profiling.arg_types import non_negative as _non_negative
from profiling.arg_types import positive as _positive

PIPELINES = ("roi", "pil", "gpu", "rrc", "gpu-rrc")


def parse_failure(text: str):
    """--inject-failure RANK:WHEN -> (rank, when, delay_s), or None for '' / 'none'.

    WHEN is a step number, 'start' (at start-up, before the extension is loaded) or 'start:SECONDS'
    (that long after start-up: lets the other ranks get into the extension's build first).
    """
    text = str(text).strip()
    if text.lower() in ("", "none"):
        return None
    parts = text.split(":")
    try:
        rank = int(parts[0])
        if len(parts) == 2 and parts[1] != "start":
            when, delay = int(parts[1]), 0.0
        elif parts[1:2] == ["start"] and len(parts) in (2, 3):
            when, delay = "start", float(parts[2]) if len(parts) == 3 else 0.0
        else:
            raise ValueError
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"expected RANK:STEP, RANK:start or RANK:start:SECONDS, got {text!r}"
        ) from None
    if rank < 0 or delay < 0 or (when != "start" and when < 0):
        raise argparse.ArgumentTypeError(f"rank, step and seconds must be >= 0, got {text!r}")
    return rank, when, delay


def _add(parser, name: str, **kwargs):
    dashed = "--" + name.replace("_", "-")
    flags = [dashed] if "_" not in name else [dashed, "--" + name]
    parser.add_argument(*flags, dest=name, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sm_job/train.py",
        description="Train the small CNN with custom_op's input pipeline: as one process, under torchrun "
        "(DDP, one DataLoader per rank) or as a SageMaker training job.",
    )
    _add(
        p,
        "data",
        default=None,
        help="ImageFolder or flat folder of JPEGs (default: the SageMaker 'train' "
        "channel, else a generated synthetic set)",
    )
    _add(
        p,
        "pipeline",
        choices=PIPELINES,
        default="roi",
        help="roi: custom_op decodes the window on the CPU in the DataLoader workers; pil: PIL decodes the "
        "whole image; gpu: workers read the bytes, the rank decodes on its GPU; rrc: RandomResizedCrop "
        "windows decoded and resized by custom_op in the workers; gpu-rrc: the same windows, decoded and "
        "resized in one call on the rank's GPU (default: roi)",
    )
    _add(p, "batch_size", type=_positive, default=32, help="per rank (default: 32)")
    _add(
        p,
        "decode_ahead",
        type=_non_negative,
        default=2,
        help="gpu and gpu-rrc on a GPU: the next N batches decode on background threads while a step trains "
        "(custom_op.decode_ahead); 0: in the step (default: 2)",
    )
    _add(
        p,
        "workers",
        type=_non_negative,
        default=None,
        help="DataLoader workers per rank (default: CPUs per rank - 1, at most 8)",
    )
    _add(p, "steps", type=_positive, default=60, help="training steps, all ranks (default: 60)")
    _add(p, "warmup", type=_non_negative, default=5, help="first steps left out of the step-time statistics")
    _add(
        p,
        "profile_steps",
        type=_non_negative,
        default=3,
        help="steps traced with torch.profiler at the end of the run (0: none; default: 3)",
    )
    _add(p, "lr", type=float, default=0.01)
    _add(p, "seed", type=int, default=0)
    _add(p, "model", default="small_cnn", help="small_cnn, or a torchvision model name")
    _add(p, "crop_size", type=_positive, default=256, help="window decoded per sample (default: 256)")
    _add(p, "output_size", type=_positive, default=224, help="training image size (default: 224)")
    _add(
        p,
        "on_error",
        choices=("raise", "skip"),
        default="raise",
        help="a corrupt JPEG stops the job naming its path (raise) or is reported and replaced (skip)",
    )
    _add(p, "num_images", type=_positive, default=256, help="synthetic set: number of images")
    _add(p, "image_size", type=_image_size, default=(533, 800), help="synthetic set: HEIGHTxWIDTH")
    _add(p, "device", default="auto", help="auto (cuda:LOCAL_RANK when a GPU is there, else cpu), cpu, cuda")
    _add(
        p,
        "dist_timeout_s",
        type=float,
        default=600.0,
        help="process-group timeout: a collective that waits this long for a rank fails (default: 600)",
    )
    _add(
        p,
        "build_cache_dir",
        default=None,
        help="custom_op's build cache (default: $CUSTOM_OP_CACHE_DIR, else /tmp/custom_op_cache on "
        "SageMaker, else custom_op's own default)",
    )
    _add(p, "log_every", type=_positive, default=10, help="print a step line every N steps")
    _add(
        p,
        "inject_failure",
        type=parse_failure,
        default=None,
        metavar="RANK:WHEN",
        help="testing: make RANK raise at start-up ('start') or at step N, to check that the job fails",
    )
    return p


def parse(argv, job_hyperparameters: dict) -> argparse.Namespace:
    """Options from argv, defaulted from the job's hyperparameters (keys with dashes or underscores)."""
    parser = build_parser()
    known = {a.dest for a in parser._actions}
    defaults = {}
    for key, value in job_hyperparameters.items():
        dest = key.replace("-", "_")
        if dest not in known:
            raise SystemExit(
                f"sm_job/train.py: unknown hyperparameter {key!r} (known: {', '.join(sorted(known - {'help'}))})"
            )
        # argparse converts string defaults with the option's type, so a JSON number or a string
        # hyperparameter goes through the same checks as the command line.
        defaults[dest] = value if value is None else str(value)
    parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    for action in parser._actions:  # argparse checks choices on the command line only, not on defaults
        value = getattr(args, action.dest, None)
        if action.choices is not None and value is not None and value not in action.choices:
            parser.error(
                f"hyperparameter {action.dest}: invalid choice {value!r} "
                f"(choose from {', '.join(map(str, action.choices))})"
            )
    for name in ("data", "build_cache_dir"):
        if getattr(args, name) in ("", "None"):
            setattr(args, name, None)
    return args
