"""Sphinx configuration of custom_op's documentation.

Build (what tests/test_docs.py runs, strict: every warning, broken link or unresolved reference fails):

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

Pages are MyST Markdown (myst_parser), so that GitHub renders them too and Sybil runs their examples;
the API reference is generated from the docstrings (autodoc, napoleon for their Google-style sections).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The checkout's package (autodoc imports it, as the tests do) and this folder's extensions.
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

project = "custom_op"
author = "custom_op contributors"
copyright = "2026, custom_op contributors"

extensions = [
    "sphinx.ext.autodoc",  # the API reference, from the docstrings
    "sphinx.ext.napoleon",  # the docstrings' Google-style Args / Returns / Raises sections
    "myst_parser",  # Markdown pages
    "bench_results",  # docs/_ext/bench_results.py: the benchmark tables and charts, from bench/results/*.json
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated"]

# Markdown: `page.md#anchor` links to headings (checked like any reference).
myst_heading_anchors = 3

# Every reference must resolve (-n on the command line sets it too).
nitpicky = True
# Types from other projects that the signatures name. Linking them would need intersphinx, which fetches
# the other projects' inventories over the network; the build must work offline, so they stay plain text.
nitpick_ignore_regex = [
    ("py:(class|obj|data)", r"(torch|numpy|np)(\..*)?"),
    ("py:(class|obj|data)", r"(typing\.|collections\.abc\.)?(Any|Optional|Union|Sequence|Tuple|List|Dict)"),
    ("py:(class|obj|data)", r"(typing\.|collections\.abc\.)?(Iterable|Iterator|Callable)"),
    ("py:(class|obj|data)", r"(typing\.)?NamedTuple"),
    ("py:class", r"custom_op\._args\.Data|Data|IntOrInts|Size|GeneratorLike"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}
# Keep the signatures readable: the aliases stay names instead of their expansions.
autodoc_type_aliases = {"Data": "Data", "IntOrInts": "IntOrInts", "Size": "Size", "GeneratorLike": "GeneratorLike"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "alabaster"  # Sphinx's own theme: no further dependency
html_title = "custom_op"
html_static_path: list = []
