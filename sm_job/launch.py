"""Create the SageMaker training job with the SageMaker Python SDK (`pip install sagemaker`).

    python sm_job/launch.py --role ARN [--api model-trainer|estimator] [--instance-type ml.g5.2xlarge]
        [--instance-count 2] [--train s3://bucket/jpegs/] [--hp steps=200 --hp pipeline=gpu] [--dry-run]

Two ways, same job (train.py under torchrun on every instance, one process per GPU):
- model-trainer (default): the current SDK's ModelTrainer with Torchrun distribution
  (sagemaker >= 3: sagemaker.train; 2.233 <= sagemaker < 3: sagemaker.modules). Runs on CPU
  instances too (one process per instance there).
- estimator: the older sagemaker.pytorch.PyTorch estimator with
  distribution={"torch_distributed": {"enabled": True}} (SDK v2 only; the SDK allows it on GPU and
  Trainium instances only).

The source directory is staged from this checkout (sm_job/source_dir.py). --dry-run stages it and
builds the job definition without submitting it (ModelTrainer still asks AWS for the default bucket
and, in SDK v3, checks the role while it is built, so it needs credentials; the estimator does not);
otherwise the job is submitted and its logs followed. tests/test_sagemaker_launch.py builds both
definitions fully offline.
Nothing here is imported by the entry point: the training container does not need the SDK.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

if __package__ in (None, ""):
    # Run as a script, Python put sm_job/ first on sys.path, where its modules (env, training, ...) could
    # shadow packages the SDK imports; the checkout's root, which makes `sm_job` importable, replaces it.
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _here:
        sys.path.pop(0)
    sys.path.insert(0, os.path.dirname(_here))

from sm_job import source_dir as source_dir_mod  # noqa: E402

BASE_JOB_NAME = "custom-op-sm-job"
# A PyTorch training image both SDK generations know, and one the SDK v2 estimator accepts for
# torch_distributed on GPU instances.
FRAMEWORK_VERSION = "2.8.0"
PY_VERSION = "py312"
TRAIN_CHANNEL = "train"
# Also the entry point's default on SageMaker; set explicitly so the job definition shows it.
JOB_ENVIRONMENT = {"CUSTOM_OP_CACHE_DIR": "/tmp/custom_op_cache"}


@dataclass
class JobSettings:
    role: str
    instance_type: str = "ml.g5.2xlarge"
    instance_count: int = 1
    # None: one process per GPU (SM_NUM_GPUS), one on a CPU instance.
    processes_per_host: Optional[int] = None
    train_s3: Optional[str] = None
    output_path: Optional[str] = None
    image_uri: Optional[str] = None
    framework_version: str = FRAMEWORK_VERSION
    py_version: str = PY_VERSION
    region: Optional[str] = None
    volume_size_gb: int = 50
    max_run_s: int = 3600
    base_job_name: str = BASE_JOB_NAME
    hyperparameters: dict = field(default_factory=dict)

    @property
    def gpu_instance(self) -> bool:
        family = self.instance_type.split(".")[1] if self.instance_type.count(".") >= 2 else ""
        return family[:1] in ("g", "p")


def default_hyperparameters(settings: JobSettings) -> dict:
    """What the job passes to train.py unless --hp overrides it: the GPU decoder on GPU instances."""
    return {"pipeline": "gpu" if settings.gpu_instance else "roi", **settings.hyperparameters}


# ---------------------------------------------------------------- the SDK, either generation


def sdk_version() -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover (Python < 3.8)
        return None
    try:
        return version("sagemaker")
    except PackageNotFoundError:
        return None


def model_trainer_api() -> SimpleNamespace:
    """ModelTrainer and its configuration classes from whichever SDK generation is installed."""
    try:
        from sagemaker.core import image_uris
        from sagemaker.core.training.configs import Compute, InputData, OutputDataConfig, SourceCode, StoppingCondition
        from sagemaker.train import ModelTrainer
        from sagemaker.train.distributed import Torchrun
    except ImportError:
        try:
            from sagemaker import image_uris
            from sagemaker.modules.configs import Compute, InputData, OutputDataConfig, SourceCode, StoppingCondition
            from sagemaker.modules.distributed import Torchrun
            from sagemaker.modules.train import ModelTrainer
        except ImportError as e:
            raise RuntimeError(
                f"ModelTrainer needs the SageMaker Python SDK >= 2.233 (pip install sagemaker); "
                f"installed: {sdk_version() or 'none'} ({e})"
            ) from e
    return SimpleNamespace(
        ModelTrainer=ModelTrainer,
        Torchrun=Torchrun,
        SourceCode=SourceCode,
        Compute=Compute,
        InputData=InputData,
        OutputDataConfig=OutputDataConfig,
        StoppingCondition=StoppingCondition,
        image_uris=image_uris,
    )


def estimator_api() -> SimpleNamespace:
    try:
        from sagemaker.pytorch import PyTorch
    except ImportError as e:
        raise RuntimeError(
            f"the PyTorch estimator is in the SageMaker Python SDK v2 only (pip install "
            f"'sagemaker<3'); installed: {sdk_version() or 'none'}. With SDK v3 use "
            f"--api model-trainer ({e})"
        ) from e
    return SimpleNamespace(PyTorch=PyTorch)


def training_image(settings: JobSettings, image_uris, region: str) -> str:
    if settings.image_uri:
        return settings.image_uri
    return image_uris.retrieve(
        "pytorch",
        region=region,
        version=settings.framework_version,
        py_version=settings.py_version,
        instance_type=settings.instance_type,
        image_scope="training",
    )


def _region(settings: JobSettings, session) -> str:
    region = (
        settings.region
        or (session.boto_region_name if session is not None else None)
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
    )
    if not region:
        raise RuntimeError("no AWS region: pass --region or set AWS_DEFAULT_REGION")
    return region


# ---------------------------------------------------------------- the two job definitions


def model_trainer(settings: JobSettings, code_dir: str, session=None):
    """(ModelTrainer, input channels) for the job; nothing is sent to AWS until .train(inputs)."""
    api = model_trainer_api()
    source = api.SourceCode(
        source_dir=str(code_dir), requirements=source_dir_mod.REQUIREMENTS, entry_script=source_dir_mod.ENTRY_POINT
    )
    kwargs = dict(
        training_image=training_image(settings, api.image_uris, _region(settings, session)),
        source_code=source,
        distributed=api.Torchrun(process_count_per_node=settings.processes_per_host),
        compute=api.Compute(
            instance_type=settings.instance_type,
            instance_count=settings.instance_count,
            volume_size_in_gb=settings.volume_size_gb,
        ),
        stopping_condition=api.StoppingCondition(max_runtime_in_seconds=settings.max_run_s),
        hyperparameters={k: str(v) for k, v in default_hyperparameters(settings).items()},
        environment=dict(JOB_ENVIRONMENT),
        role=settings.role,
        base_job_name=settings.base_job_name,
    )
    if settings.output_path:
        kwargs["output_data_config"] = api.OutputDataConfig(s3_output_path=settings.output_path)
    if session is not None:
        kwargs["sagemaker_session"] = session
    trainer = api.ModelTrainer(**kwargs)
    inputs = [api.InputData(channel_name=TRAIN_CHANNEL, data_source=settings.train_s3)] if settings.train_s3 else None
    return trainer, inputs


def pytorch_estimator(settings: JobSettings, code_dir: str, session=None):
    """(PyTorch estimator, fit() inputs) for the job; nothing is sent to AWS until .fit(inputs)."""
    api = estimator_api()
    kwargs = dict(
        entry_point=source_dir_mod.ENTRY_POINT,
        source_dir=str(code_dir),  # its requirements.txt is installed by the training toolkit
        role=settings.role,
        instance_type=settings.instance_type,
        instance_count=settings.instance_count,
        volume_size=settings.volume_size_gb,
        max_run=settings.max_run_s,
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters=default_hyperparameters(settings),
        environment=dict(JOB_ENVIRONMENT),
        base_job_name=settings.base_job_name,
        # SageMaker Debugger and Profiler hooks are not needed: the job writes its own traces.
        disable_profiler=True,
        debugger_hook_config=False,
    )
    if settings.image_uri:
        kwargs["image_uri"] = settings.image_uri
    else:
        kwargs.update(framework_version=settings.framework_version, py_version=settings.py_version)
    if settings.output_path:
        kwargs["output_path"] = settings.output_path
    if session is not None:
        kwargs["sagemaker_session"] = session
    estimator = api.PyTorch(**kwargs)
    inputs = {TRAIN_CHANNEL: settings.train_s3} if settings.train_s3 else None
    return estimator, inputs


# ---------------------------------------------------------------- command line


def _hp(text: str):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python sm_job/launch.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--api", choices=("model-trainer", "estimator"), default="model-trainer")
    p.add_argument("--role", required=True, help="IAM role ARN the job runs as")
    p.add_argument("--instance-type", default=JobSettings.instance_type)
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument(
        "--processes-per-host",
        type=int,
        default=None,
        help="torchrun processes per instance (ModelTrainer only; default: one per GPU)",
    )
    p.add_argument(
        "--train",
        metavar="S3_URI",
        help="JPEG folder in S3 for the 'train' channel (default: none, the job generates a synthetic set)",
    )
    p.add_argument("--output-path", metavar="S3_URI", help="where model.tar.gz and output.tar.gz go")
    p.add_argument(
        "--image-uri",
        help=f"training image (default: the PyTorch {FRAMEWORK_VERSION} {PY_VERSION} training image of the region)",
    )
    p.add_argument("--framework-version", default=FRAMEWORK_VERSION)
    p.add_argument("--py-version", default=PY_VERSION)
    p.add_argument("--region")
    p.add_argument("--max-run-s", type=int, default=3600)
    p.add_argument(
        "--hp",
        type=_hp,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter for train.py (repeatable), e.g. --hp steps=200",
    )
    p.add_argument("--source-dir", help="stage the source directory here (default: a temporary folder)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="stage and build the job definition, submit nothing "
        "(ModelTrainer still needs AWS credentials to build it)",
    )
    p.add_argument("--no-wait", action="store_true", help="submit and return without following the logs")
    return p


def settings_from_args(args) -> JobSettings:
    return JobSettings(
        role=args.role,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        processes_per_host=args.processes_per_host,
        train_s3=args.train,
        output_path=args.output_path,
        image_uri=args.image_uri,
        framework_version=args.framework_version,
        py_version=args.py_version,
        region=args.region,
        max_run_s=args.max_run_s,
        hyperparameters=dict(args.hp),
    )


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from_args(args)
    tmp = None
    if args.source_dir:
        code_dir = source_dir_mod.stage(args.source_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="sm_job-source-")
        code_dir = source_dir_mod.stage(os.path.join(tmp.name, "code"))
    try:
        if args.api == "model-trainer":
            job, inputs = model_trainer(settings, code_dir)
            description = {
                "api": "ModelTrainer",
                "training_image": job.training_image,
                "distributed": type(job.distributed).__name__,
                "process_count_per_node": job.distributed.process_count_per_node,
            }
        else:
            job, inputs = pytorch_estimator(settings, code_dir)
            description = {
                "api": "PyTorch estimator",
                "training_image": job.training_image_uri(),
                "distribution": job.distribution,
            }
        description.update(
            sdk=sdk_version(),
            source_dir=str(code_dir),
            files=len(source_dir_mod.staged_files(code_dir)),
            instance_type=settings.instance_type,
            instance_count=settings.instance_count,
            hyperparameters=default_hyperparameters(settings),
            environment=JOB_ENVIRONMENT,
            inputs=str(inputs),
        )
        print(json.dumps(description, indent=2, default=str))
        if args.dry_run:
            return 0
        if args.api == "model-trainer":
            job.train(input_data_config=inputs, wait=not args.no_wait, logs=not args.no_wait)
        else:
            job.fit(inputs, wait=not args.no_wait, logs="All" if not args.no_wait else "None")
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
