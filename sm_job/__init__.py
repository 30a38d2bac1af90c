"""Run the training script of this repository unchanged on a laptop, under torchrun and as a SageMaker job.

The folder is called sm_job, not sagemaker: a `sagemaker/` package at the repository root would be
found before the SageMaker Python SDK by anything run from the root (pytest, `python -m ...`, the
training container, whose code directory is on sys.path), and `import sagemaker` would import this.

Modules: env (the SageMaker container environment, with defaults outside it), hyperparameters (the
command line and SM_HPS), distributed (torchrun ranks and the process group), extension (custom_op
built once per host into a local cache), training (the DDP loop and what it writes), train (the entry
point), source_dir (the job's source directory), launch (the SageMaker SDK launcher), rehearse (a
local rehearsal of a SageMaker job under torchrun).
"""
