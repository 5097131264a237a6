"""setuptools build step of the trainctl client: after copying the package,
generate the gRPC stubs (trainctl.v1) from the repository's proto/ with
build_stubs.py, so that nothing generated is kept in git. Metadata is in
pyproject.toml.

Building or installing writes nothing into the source tree: setuptools'
build/ and trainctl.egg-info go to a temporary directory removed when the
build ends (an editable install, `pip install -e`, still writes the stubs to
trainctl/v1/, which git ignores, since it runs from the sources)."""

import atexit
import os
import shutil
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# No __pycache__/ next to build_stubs.py either.
sys.dont_write_bytecode = True

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


def scratch_options():
    """setup() options putting setuptools' build/ and egg-info into a fresh
    temporary directory, removed at exit, instead of next to the sources.
    Options given on the command line (--build-base, --egg-base) still win.
    Not for the legacy `setup.py develop`, whose egg-info must outlive the
    build."""
    if "develop" in sys.argv[1:]:
        return {}
    scratch = tempfile.mkdtemp(prefix="trainctl-setup-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return {"build": {"build_base": os.path.join(scratch, "build")},
            "egg_info": {"egg_base": scratch}}


setup(cmdclass={"build_py": BuildPyWithStubs}, options=scratch_options())
