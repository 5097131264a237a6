"""setuptools build step of the trainctl client: after copying the package,
generate the gRPC stubs (trainctl.v1) from the repository's proto/ with
build_stubs.py, so that nothing generated is kept in git. Metadata is in
pyproject.toml."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    """build_py, then protoc + grpc_python_plugin into the built package (or,
    for an editable install, next to the sources in trainctl/v1, which git
    ignores)."""

    def run(self):
        super().run()
        out = HERE if getattr(self, "editable_mode", False) else self.build_lib
        try:
            path = build_stubs.generate(out)
        except RuntimeError as e:
            sys.exit(str(e))
        self.announce("generated the trainctl.v1 stubs in %s" % path, level=2)


setup(cmdclass={"build_py": BuildPyWithStubs})
