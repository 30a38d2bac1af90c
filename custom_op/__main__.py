"""python -m custom_op {build,info,prepare}: prebuild the C++ library, say which one is in use, or prepare JPEGs.

Importing the package already loads the library (building it into the cache if
needed), so both commands only report what that import did.
"""

import argparse
import sys

import torch

from . import _build


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (docs/cli_tables.py writes the command-line reference's option table from it)."""
    from . import prepare_folder

    parser = argparse.ArgumentParser(prog="python -m custom_op", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the C++ library into the JIT cache unless a current prebuilt one exists")
    sub.add_parser("info", help="print which library is loaded, from where, and the cache dir")
    prepare_folder.add_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "prepare":
        from . import prepare_folder

        return prepare_folder.run(args)

    info = _build.library_info()
    if args.command == "build":
        if info["kind"] == "prebuilt":
            print(f"prebuilt library in use, nothing to build: {info['path']}")
            print(f"(set {_build.ENV_FORCE_JIT}=1 to build into the JIT cache anyway)")
        else:
            state = "built" if info.get("built") == "yes" else "already built"
            print(f"{state}: {info['path']}")
        return 0

    print(f"library:        {info['path']}")
    print(f"kind:           {info['kind']}")
    print(f"libjpeg-turbo:  {info.get('libjpeg_turbo_version', '?')}")
    print(f"torch:          {torch.__version__} (the library serves torch >= {info.get('stable_abi', '?')})")
    try:
        root = _build.choose_cache_root()
        print(f"JIT cache root: {root}/custom_op")
    except RuntimeError as e:
        print(f"JIT cache root: none usable ({e})")
    if info.get("cache_dir"):
        print(f"JIT cache dir:  {info['cache_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
