"""The SageMaker launcher's job definitions, built offline with the real SDK (sm_job/launch.py).

Runs only where the SageMaker Python SDK is installed; it is not in the test extras (SDK v3 pulls in
about 1 GB: mlflow, pandas, pyarrow, scipy, scikit-learn, ...), so these tests skip elsewhere. Nothing
reaches AWS: the session's S3 uploads are recorded instead of sent, the role is not looked up, and
the request that would go to CreateTrainingJob is checked. Neither torch nor the C++ extension is
needed here, so an SDK-only environment can run this file.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

sagemaker = pytest.importorskip(
    "sagemaker",
    reason="the SageMaker Python SDK is not installed (heavy, not in the test extras): "
    "pip install sagemaker (or 'sagemaker<3' for the PyTorch estimator) in a separate venv",
)

from sm_job import hyperparameters, launch, source_dir  # noqa: E402
from sm_job.env import decode_hyperparameter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROLE = "arn:aws:iam::123456789012:role/sm-job-test"
TRAIN_S3 = "s3://example-bucket/jpegs/"


@pytest.fixture
def offline_aws(monkeypatch):
    for k, v in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def offline_session(session_cls, uploads: dict, copy_to: Path):
    class OfflineSession(session_cls):
        def default_bucket(self):
            return "test-bucket"

        def upload_data(self, path, bucket=None, key_prefix="data", callback=None, extra_args=None):
            # Keep a copy: the SDK deletes its temporary folders right after uploading them.
            name = key_prefix.rstrip("/").split("/")[-1]
            shutil.copytree(path, copy_to / name, dirs_exist_ok=True)
            uploads[name] = copy_to / name
            return f"s3://{bucket or 'test-bucket'}/{key_prefix}"

        def _get_account_id_if_default_bucket(self, bucket):
            return None

    return OfflineSession()


def settings(**kw):
    return launch.JobSettings(
        role=ROLE,
        instance_type="ml.g5.12xlarge",
        instance_count=2,
        train_s3=TRAIN_S3,
        hyperparameters={"steps": "100"},
        **kw,
    )


def test_the_sdk_is_not_shadowed_by_the_checkout():
    assert sagemaker.__file__ is not None
    assert ROOT not in Path(sagemaker.__file__).resolve().parents


def test_model_trainer_job_definition(tmp_path, offline_aws, monkeypatch):
    api = launch.model_trainer_api()
    module = sys.modules[api.ModelTrainer.__module__]
    defaults = getattr(module, "TrainDefaults", None)
    if defaults is not None and hasattr(defaults, "get_role"):  # SDK v3 validates the role with IAM
        monkeypatch.setattr(defaults, "get_role", staticmethod(lambda role=None, sagemaker_session=None: role))
    uploads = {}
    session = offline_session(module.Session, uploads, tmp_path / "uploaded")
    code = source_dir.stage(tmp_path / "code")
    trainer, inputs = launch.model_trainer(settings(), code, session=session)

    request = trainer._create_training_job_args(input_data_config=inputs)
    spec = request["algorithm_specification"]
    assert "pytorch-training:2.8.0-gpu-py312" in spec.training_image
    assert request["hyper_parameters"] == {"pipeline": "gpu", "steps": "100"}
    assert request["environment"] == {"CUSTOM_OP_CACHE_DIR": "/tmp/custom_op_cache"}
    resources = request["resource_config"]
    assert (resources.instance_type, resources.instance_count) == ("ml.g5.12xlarge", 2)
    channels = {c.channel_name: c.data_source.s3_data_source.s3_uri for c in request["input_data_config"]}
    assert channels["train"] == TRAIN_S3
    assert {"code", "sm_drivers"} <= set(channels)

    # What the container gets: our staged source dir as code, and the SDK's driver, which installs
    # requirements.txt from the code folder and starts train.py under torchrun, one process per GPU.
    assert sorted(source_dir.staged_files(uploads["code"])) == sorted(source_dir.staged_files(code))
    drivers = uploads["sm_drivers"]
    script = (drivers / "sm_train.sh").read_text()
    assert "requirements.txt" in script and "torchrun_driver.py" in script
    assert json.loads((drivers / "sourcecode.json").read_text())["entry_script"] == "train.py"
    assert json.loads((drivers / "distributed.json").read_text())["process_count_per_node"] is None

    # The driver passes hyperparameters as --key value: the entry point must accept them.
    cli = [x for k, v in request["hyper_parameters"].items() for x in (f"--{k}", v)]
    args = hyperparameters.parse(cli, {})
    assert (args.pipeline, args.steps) == ("gpu", 100)

    train = trainer.train
    if "dry_run" in train.__code__.co_varnames:  # SDK v3: the public validation path, nothing submitted
        assert train(input_data_config=inputs, dry_run=True) is None


def test_pytorch_estimator_job_definition(tmp_path, offline_aws, monkeypatch):
    try:
        api = launch.estimator_api()
    except RuntimeError as e:
        pytest.skip(f"the installed SDK has no PyTorch estimator: {e}")
    import sagemaker.estimator as estimator_module
    from sagemaker.estimator import _TrainingJob
    from sagemaker.fw_utils import UploadedCode
    from sagemaker.session import Session

    tarred = {}

    def fake_tar_and_upload_dir(session, bucket, s3_key_prefix, script, directory, **kwargs):
        tarred.update(script=script, directory=directory)
        return UploadedCode(s3_prefix=f"s3://{bucket}/{s3_key_prefix}/sourcedir.tar.gz", script_name=script)

    monkeypatch.setattr(estimator_module, "tar_and_upload_dir", fake_tar_and_upload_dir)
    session = offline_session(Session, {}, tmp_path / "uploaded")
    code = source_dir.stage(tmp_path / "code")
    estimator, inputs = launch.pytorch_estimator(settings(), code, session=session)
    assert isinstance(estimator, api.PyTorch)
    assert estimator.distribution == {"torch_distributed": {"enabled": True}}

    estimator._prepare_for_training()
    request = _TrainingJob._get_train_args(estimator, inputs, experiment_config=None)
    assert tarred == {"script": "train.py", "directory": str(code)}
    assert "pytorch-training:2.8.0-gpu-py312" in request["image_uri"]
    assert request["resource_config"]["InstanceCount"] == 2
    assert request["environment"] == {"CUSTOM_OP_CACHE_DIR": "/tmp/custom_op_cache"}
    assert request["input_config"][0]["ChannelName"] == "train"
    hps = request["hyperparameters"]
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert decode_hyperparameter(hps["sagemaker_program"]) == "train.py"

    # hyperparameters.json holds these JSON-encoded strings; the entry point decodes them as the toolkit
    # does and drops the SDK's own sagemaker_* keys.
    job_hps = {k: decode_hyperparameter(v) for k, v in hps.items() if not k.startswith("sagemaker_")}
    args = hyperparameters.parse([], job_hps)
    assert (args.pipeline, args.steps) == ("gpu", 100)


def test_estimator_on_sdk_v3_says_what_to_install(monkeypatch):
    try:
        import sagemaker.pytorch  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="sagemaker<3"):
            launch.estimator_api()
    else:
        pytest.skip("this SDK still has the PyTorch estimator")
