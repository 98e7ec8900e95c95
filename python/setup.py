"""Build hook for `pip install ./python`: bundle libzcc.so into the package.

The library is taken from ZCC_LIBRARY if set, else from the repository's
build tree (../build/src/libzcc.so). When neither exists the package
installs without it and finds libzcc.so at run time through ZCC_LIBRARY or
the system loader (e.g. after `cmake --install build`)."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_library():
    env = os.environ.get("ZCC_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise SystemExit("zcc setup: ZCC_LIBRARY=%s does not exist" % env)
        return env
    built = os.path.join(os.path.dirname(HERE), "build", "src", "libzcc.so")
    return built if os.path.exists(built) else None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = find_library()
        dest = os.path.join(self.build_lib, "zcc", "libzcc.so")
        if lib:
            self.announce("zcc: bundling %s" % lib, level=2)
            # resolve links: the package holds the library itself
            shutil.copyfile(os.path.realpath(lib), dest)
        else:
            self.announce("zcc: no libzcc.so found to bundle; it is looked up at run "
                          "time (ZCC_LIBRARY, then the system loader)", level=2)


setup(cmdclass={"build_py": BuildPyWithLibrary})
