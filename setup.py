"""Build custom_op._C ahead of time from the same sources and flags as the JIT build.

Torch must already be installed and visible to the build, so install with
    pip install torch==2.13.0
    pip install --no-build-isolation .
Without torch in the build environment (plain `pip install .`, which builds in an
isolated env) the wheel has no prebuilt library and custom_op compiles itself on
first import. CUSTOM_OP_BUILD_EXT=0 skips the prebuilt library, =1 makes its
absence an error.
"""

import importlib.util
import os
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "custom_op"


def _load_by_path(module):
    # The package itself imports torch and loads the library; these two helper files do neither.
    path = os.path.join(HERE, PACKAGE, module + ".py")
    spec = importlib.util.spec_from_file_location(f"_custom_op_setup{module}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


config = _load_by_path("_build_config")
jpeg_paths = _load_by_path("_jpeg_paths")


def _extension_and_cmdclass():
    mode = os.environ.get("CUSTOM_OP_BUILD_EXT", "auto").strip().lower()
    if mode in ("0", "no", "false", "off"):
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        message = (
            "custom_op: torch is not importable in the build environment, so the prebuilt C++ "
            "library is not built (it will be compiled on first import instead). To prebuild: "
            "pip install torch, then pip install --no-build-isolation ."
        )
        if mode in ("1", "yes", "true", "on"):
            sys.exit(message)
        print("WARNING: " + message, file=sys.stderr)
        return [], {}

    jpeg = jpeg_paths.find_libjpeg_turbo()  # raises with install instructions when missing
    csrc = os.path.join(HERE, PACKAGE, "csrc")
    sources = [os.path.relpath(p, HERE) for p in config.cpu_sources(csrc)]
    if not sources:
        sys.exit(f"custom_op: no C++ sources under {csrc}")
    if not os.environ.get("MAX_JOBS"):
        # ninja's default (cores + 2) can exhaust memory on small machines; torch's headers are heavy.
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:
            cpus = os.cpu_count() or 1
        os.environ["MAX_JOBS"] = str(max(1, min(len(sources), cpus)))

    ext = CppExtension(
        name=f"{PACKAGE}.{config.PREBUILT_NAME}",
        sources=sources,
        include_dirs=config.include_dirs(jpeg, csrc),
        extra_compile_args={"cxx": config.compile_flags()},
        extra_link_args=config.link_flags(jpeg),
    )
    info = config.prebuilt_info(jpeg, torch.__version__, csrc)

    class BuildExtWithInfo(BuildExtension):
        """Also writes _C.buildinfo.json, which the loader compares with the installed sources."""

        def _info_paths(self):
            build_py = self.get_finalized_command("build_py")
            regular = os.path.join(self.build_lib, PACKAGE, config.PREBUILT_INFO)
            inplace = os.path.join(build_py.get_package_dir(PACKAGE), config.PREBUILT_INFO)
            return regular, inplace

        def run(self):
            super().run()
            regular, inplace = self._info_paths()
            os.makedirs(os.path.dirname(regular), exist_ok=True)
            config.write_prebuilt_info(regular, info)
            if self.inplace:
                config.write_prebuilt_info(inplace, info)

        def get_outputs(self):
            regular, inplace = self._info_paths()
            return super().get_outputs() + [inplace if self.inplace else regular]

        def get_output_mapping(self):
            mapping = dict(super().get_output_mapping())
            if self.inplace:
                regular, inplace = self._info_paths()
                mapping[regular] = inplace
            return mapping

    return [ext], {"build_ext": BuildExtWithInfo}


ext_modules, cmdclass = _extension_and_cmdclass()

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
