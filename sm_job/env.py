"""The SageMaker training environment, read from SM_* variables and the /opt/ml tree, with defaults outside it.

SageMaker's training toolkit (and the SDK's ModelTrainer driver) export SM_MODEL_DIR, SM_OUTPUT_DATA_DIR,
SM_CHANNEL_<NAME>, SM_NUM_GPUS, SM_HOSTS, SM_CURRENT_HOST, SM_HPS ... before starting the entry point.
When a variable is missing, the file it comes from under the container's base directory is read
instead (SAGEMAKER_BASE_DIR, default /opt/ml: input/config/hyperparameters.json, resourceconfig.json,
input/data/<channel>), and outside SageMaker everything falls back to local folders under ./runs.
Nothing here imports torch, so the rehearsal and the tests can use it cheaply.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"
DEFAULT_BASE_DIR = "/opt/ml"
TRAIN_CHANNEL = "train"
# Outside SageMaker: where the model and the traces go when nothing says otherwise.
LOCAL_RUN_DIR = os.path.join("runs", "sm_job")
# On SageMaker: the extension's build cache. Local disk of the instance, never uploaded: SageMaker
# uploads only /opt/ml/model (model.tar.gz), /opt/ml/output (output.tar.gz) and, when asked,
# /opt/ml/checkpoints and /opt/ml/output/tensorboard.
SAGEMAKER_BUILD_CACHE = "/tmp/custom_op_cache"
# Any of these says the script runs in a SageMaker training container (or a rehearsal of one).
_SAGEMAKER_MARKERS = (
    "SM_TRAINING_ENV",
    "SM_MODEL_DIR",
    "SM_OUTPUT_DATA_DIR",
    "SM_HPS",
    "SM_CURRENT_HOST",
    "SM_CHANNELS",
    BASE_DIR_ENV,
)


def decode_hyperparameter(value):
    """SageMaker stores every hyperparameter as a string, JSON-encoded by the SDK ("32", "\\"roi\\"")."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _json_env(env: Mapping[str, str], name: str, default=None):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{name} is not valid JSON: {raw[:200]!r}") from None


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None


@dataclass
class JobEnv:
    in_sagemaker: bool
    base_dir: str
    # The training channel's folder, or None when the job has none (the entry point then makes data).
    train_dir: Optional[str]
    model_dir: str
    output_data_dir: str
    # Hyperparameters given to the job (SM_HPS or hyperparameters.json), decoded; the command line wins.
    hyperparameters: dict = field(default_factory=dict)
    num_gpus: Optional[int] = None
    num_cpus: Optional[int] = None
    hosts: list = field(default_factory=list)
    current_host: str = ""

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host) if self.current_host in self.hosts else 0


def read_job_env(environ: Optional[Mapping[str, str]] = None) -> JobEnv:
    env = os.environ if environ is None else environ
    base = env.get(BASE_DIR_ENV, DEFAULT_BASE_DIR)
    config_dir = env.get("SM_INPUT_CONFIG_DIR") or os.path.join(base, "input", "config")
    hp_file = _read_json(os.path.join(config_dir, "hyperparameters.json"))
    resources = _json_env(env, "SM_RESOURCE_CONFIG") or _read_json(os.path.join(config_dir, "resourceconfig.json"))
    in_sagemaker = any(env.get(k) for k in _SAGEMAKER_MARKERS) or hp_file is not None or resources is not None

    hps = _json_env(env, "SM_HPS")
    if hps is None:
        hps = {k: decode_hyperparameter(v) for k, v in (hp_file or {}).items()}
    # The SDKs pass their own settings as hyperparameters too (sagemaker_program, sagemaker_submit_directory, ...).
    hps = {k: v for k, v in hps.items() if not k.startswith("sagemaker_")}

    train_dir = env.get(f"SM_CHANNEL_{TRAIN_CHANNEL.upper()}")
    if not train_dir and in_sagemaker:
        candidate = os.path.join(base, "input", "data", TRAIN_CHANNEL)
        train_dir = candidate if os.path.isdir(candidate) else None

    if in_sagemaker:
        model_dir = env.get("SM_MODEL_DIR") or os.path.join(base, "model")
        output_data_dir = env.get("SM_OUTPUT_DATA_DIR") or os.path.join(base, "output", "data")
    else:
        model_dir = os.path.abspath(os.path.join(LOCAL_RUN_DIR, "model"))
        output_data_dir = os.path.abspath(os.path.join(LOCAL_RUN_DIR, "output"))

    hosts = _json_env(env, "SM_HOSTS") or (resources or {}).get("hosts") or []
    current_host = env.get("SM_CURRENT_HOST") or (resources or {}).get("current_host") or ""
    num_gpus = env.get("SM_NUM_GPUS")
    num_cpus = env.get("SM_NUM_CPUS")
    return JobEnv(
        in_sagemaker=in_sagemaker,
        base_dir=base,
        train_dir=train_dir or None,
        model_dir=model_dir,
        output_data_dir=output_data_dir,
        hyperparameters=hps,
        num_gpus=int(num_gpus) if num_gpus not in (None, "") else None,
        num_cpus=int(num_cpus) if num_cpus not in (None, "") else None,
        hosts=list(hosts),
        current_host=current_host,
    )
