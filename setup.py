"""Build custom_op._C (and, with CUDA, custom_op._C_cuda) ahead of time from the same sources and
flags as the JIT build.

Torch must already be installed and visible to the build, so install with
    pip install torch==2.13.0 ninja
    pip install --no-build-isolation -e .               # a clone you work in: builds custom_op/_C*.so in place
    pip install --no-build-isolation .                  # a copy in site-packages
    pip wheel --no-build-isolation --no-deps -w dist .  # a wheel for this Python and platform
The CPU library is built on torch's stable ABI: it serves every torch from the version it targets on
(_build_config.STABLE_ABI_TARGET). The GPU library serves the torch it was built with.
Without torch in the build environment (plain `pip install .`, which builds in an
isolated env) the wheel has no prebuilt library and custom_op compiles itself on
first import. CUSTOM_OP_BUILD_EXT=0 skips the prebuilt library, =1 makes its
absence an error.

The GPU (nvJPEG) library is prebuilt too when torch has CUDA, nvcc and nvJPEG are found, and the
GPU architectures are known (the visible GPUs', or TORCH_CUDA_ARCH_LIST). CUSTOM_OP_BUILD_CUDA=auto
(default) builds it when it can and prints one WARNING line saying why not otherwise; =1 makes its
absence an error; =0 skips it. Without it, the GPU library is compiled on first use with
device="cuda".
"""

import importlib.util
import os
import sys
import sysconfig

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "custom_op"


def _load_by_path(module):
    # The package itself imports torch and loads the library; these helper files do neither.
    path = os.path.join(HERE, PACKAGE, module + ".py")
    spec = importlib.util.spec_from_file_location(f"_custom_op_setup{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


config = _load_by_path("_build_config")
build_progress = _load_by_path("_build_progress")
jpeg_paths = _load_by_path("_jpeg_paths")
nvjpeg_paths = _load_by_path("_nvjpeg_paths")


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _cpu_extension(torch, CppExtension, csrc):
    """The CPU library and its buildinfo (_build_config.cpu_library describes both builds)."""
    library = config.cpu_library(jpeg_paths.find_libjpeg_turbo(), csrc)  # raises with install instructions
    if not library.sources:
        sys.exit(f"custom_op: no C++ sources under {csrc}")
    ext = CppExtension(
        name=f"{PACKAGE}.{library.prebuilt_name}",
        sources=[os.path.relpath(p, HERE) for p in library.sources],
        include_dirs=list(library.include_dirs),
        extra_compile_args={"cxx": list(library.cflags)},
        extra_link_args=list(library.ldflags),
    )
    return ext, library.buildinfo(torch.__version__)


def _cuda_facts(torch, csrc):
    """What decides whether the GPU library can be built here: (reason it cannot or None, nvjpeg)."""
    nvcc = nvjpeg = None
    nvjpeg_error = None
    visible = 0
    if torch is not None and torch.version.cuda:
        from torch.utils import cpp_extension

        home = cpp_extension.CUDA_HOME
        candidate = os.path.join(home, "bin", "nvcc") if home else None
        nvcc = candidate if candidate and os.path.isfile(candidate) else None
        try:
            nvjpeg = nvjpeg_paths.find_nvjpeg(home)
        except nvjpeg_paths.NvjpegNotFound as e:
            nvjpeg_error = str(e)
        visible = torch.cuda.device_count()
    reason = config.cuda_unbuildable_reason(
        torch_version=None if torch is None else torch.__version__,
        torch_cuda=None if torch is None else torch.version.cuda,
        nvcc=nvcc,
        nvjpeg_error=nvjpeg_error,
        arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST"),
        visible_gpus=visible,
    )
    return reason, nvjpeg


def _cuda_extension(torch, csrc, nvjpeg):
    """The GPU library and its buildinfo (_build_config.cuda_library describes both builds)."""
    from torch.utils import cpp_extension

    library = config.cuda_library(nvjpeg, csrc)
    ext = cpp_extension.CUDAExtension(
        name=f"{PACKAGE}.{library.prebuilt_name}",
        sources=[os.path.relpath(p, HERE) for p in library.sources],
        include_dirs=list(library.include_dirs),
        # nvcc gets torch's default flags only, as in the JIT build.
        extra_compile_args={"cxx": list(library.cflags), "nvcc": []},
        extra_link_args=list(library.ldflags),
    )
    # The -gencode flags BuildExtension will pass (from TORCH_CUDA_ARCH_LIST or the visible GPUs).
    arch_flags = cpp_extension._get_cuda_arch_flags([])
    return ext, library.buildinfo(torch.__version__, torch.version.cuda, arch_flags)


def _extensions_and_cmdclass():
    cpu_mode = os.environ.get("CUSTOM_OP_BUILD_EXT", "auto").strip().lower()
    try:
        cuda_mode = config.parse_build_mode(os.environ.get(config.BUILD_CUDA_ENV))
    except ValueError as e:
        sys.exit(str(e))
    want_cpu = cpu_mode not in ("0", "no", "false", "off")
    if not want_cpu and cuda_mode == "0":
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        torch = None
    csrc = os.path.join(HERE, PACKAGE, "csrc")

    extensions, infos = [], {}
    if want_cpu:
        if torch is None:
            message = (
                "custom_op: torch is not importable in the build environment, so the prebuilt C++ "
                "library is not built (it will be compiled on first import instead). To prebuild: "
                "pip install torch, then pip install --no-build-isolation ."
            )
            if cpu_mode in ("1", "yes", "true", "on"):
                sys.exit(message)
            print("WARNING: " + message, file=sys.stderr)
        else:
            ext, info = _cpu_extension(torch, CppExtension, csrc)
            extensions.append(ext)
            infos[config.PREBUILT_INFO] = info

    if cuda_mode != "0":
        reason, nvjpeg = _cuda_facts(torch, csrc)
        action, message = config.decide_cuda_build(cuda_mode, reason)
        if action == "error":
            sys.exit(message)
        if message:
            print(message, file=sys.stderr)
        if action == "build":
            ext, info = _cuda_extension(torch, csrc, nvjpeg)
            extensions.append(ext)
            infos[config.CUDA_PREBUILT_INFO] = info

    if not extensions:
        return [], {}
    if not os.environ.get("MAX_JOBS"):
        # ninja's default (cores + 2) can exhaust memory on small machines; torch's headers are heavy.
        os.environ["MAX_JOBS"] = str(max(1, min(max(len(e.sources) for e in extensions), _cpu_count())))

    class BuildExtWithInfo(BuildExtension):
        """Also writes each library's buildinfo json, which the loader compares with the installed sources."""

        def finalize_options(self):
            super().finalize_options()
            if getattr(self, "editable_mode", False):
                # An editable install (pip install -e) compiles in a temporary folder, so each reinstall would
                # compile everything again: use the folder of a regular build (pip install ., pip wheel .), where
                # ninja recompiles only the objects whose command line or sources (headers included) changed.
                plat = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
                self.build_temp = os.path.join(HERE, "build", f"temp.{plat}")

        def _info_paths(self, info_file):
            build_py = self.get_finalized_command("build_py")
            regular = os.path.join(self.build_lib, PACKAGE, info_file)
            inplace = os.path.join(build_py.get_package_dir(PACKAGE), info_file)
            return regular, inplace

        def build_extension(self, ext):
            # pip shows none of the compile's output (without -v): say on the terminal how far it is.
            if not ext.name.endswith("." + config.CUDA_PREBUILT_NAME):
                with build_progress.reporting("the C++ library"):
                    return super().build_extension(ext)
            # Objects of its own: both libraries compile common/*.cpp, with different flags.
            saved = self.build_temp
            self.build_temp = os.path.join(saved, config.CUDA_PREBUILT_NAME)
            try:
                with build_progress.reporting("the GPU library"):
                    super().build_extension(ext)
            finally:
                self.build_temp = saved

        def run(self):
            super().run()
            for info_file, info in infos.items():
                regular, inplace = self._info_paths(info_file)
                os.makedirs(os.path.dirname(regular), exist_ok=True)
                config.write_prebuilt_info(regular, info)
                if self.inplace:
                    config.write_prebuilt_info(inplace, info)

        def get_outputs(self):
            written = [self._info_paths(f)[1 if self.inplace else 0] for f in infos]
            return super().get_outputs() + written

        def get_output_mapping(self):
            mapping = dict(super().get_output_mapping())
            if self.inplace:
                for info_file in infos:
                    regular, inplace = self._info_paths(info_file)
                    mapping[regular] = inplace
            return mapping

    return extensions, {"build_ext": BuildExtWithInfo}


ext_modules, cmdclass = _extensions_and_cmdclass()

setup(
    packages=[PACKAGE],
    # The C++ sources ship with the package: the JIT build needs them, and the loader
    # hashes them to tell whether the prebuilt library is current.
    package_data={
        PACKAGE: [f"csrc/**/*{s}" for s in config.SOURCE_SUFFIXES + config.HEADER_SUFFIXES],
    },
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    zip_safe=False,
)
