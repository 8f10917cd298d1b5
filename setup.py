"""The compiled part of leakattack: the sketch kernels (``leakattack/sketch/_kernels.c``).

They are the in-place cache-blocked Walsh-Hadamard transform, the fused SRHT apply and
adjoint, and the bucketed scatter and gather of CountSketch, the sparse embedding and
SRHT's row selection.  Everything else about the distribution (name, dependencies,
packages, scripts) is in pyproject.toml; setuptools reads both.  The kernels are a plain
CPython C extension (buffer protocol, no torch headers), so ``pip install`` needs only a
C compiler and the Python headers; the extension is ``optional``: where it cannot be
compiled the install still succeeds and ``leakattack.sketch`` computes the same maps
with torch operations instead.
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
