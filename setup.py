"""The compiled part of leakattack: the in-place fast Walsh-Hadamard kernel of the SRHT sketch.

Everything else about the distribution (name, dependencies, packages, scripts) is in
pyproject.toml; setuptools reads both.  The kernel is a plain CPython C extension
(buffer protocol, no torch headers), so ``pip install`` needs only a C compiler and the
Python headers; it is ``optional``: where it cannot be compiled the install still
succeeds and ``leakattack.sketch.hadamard`` uses its pure-torch transform instead.
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    compile_args, link_args = ["/O2"], []
else:
    compile_args, link_args = ["-O3", "-pthread"], ["-pthread"]

setup(
    ext_modules=[
        Extension(
            "leakattack.sketch._kernels",
            sources=["leakattack/sketch/_kernels.c"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            optional=True,
        )
    ]
)
