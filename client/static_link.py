#!/usr/bin/env python3
"""Link launcher of the `trainctl` CLI (CMake RULE_LAUNCH_LINK).

Runs the link command it is given, with every shared gRPC, protobuf, upb,
Abseil, spdlog and fmt library replaced by its static archive from the same
directory (Debian's -dev packages ship both), grouped so their order does not
matter. Why: a CLI process starts once per command, and with 57 shared
libraries 46% of a `trainctl submit`'s CPU went to the dynamic loader's symbol
lookups (bench/README.md: 17 ms -> 7 ms CPU per submit). Libraries without an
archive (libc, OpenSSL, zlib, c-ares, re2) stay shared. A command with none
of them is run unchanged.
"""
import os
import re
import sys

STATIC = re.compile(
    r"^(?P<dir>/\S+)/(?P<name>lib(absl_\w+|grpc\+\+|grpc|gpr|upb|protobuf|"
    r"address_sorting|spdlog|fmt))\.so(\.[0-9.]+)?$")


def main(argv):
    args, archives = [], []
    for arg in argv:
        m = STATIC.match(arg)
        archive = m and os.path.join(m.group("dir"), m.group("name") + ".a")
        if archive and os.path.exists(archive):
            archives.append(archive)
        else:
            args.append(arg)
    if archives:
        # Their shared dependencies come after the group.
        args += ["-Wl,--start-group"] + archives + [
            "-Wl,--end-group", "-lssl", "-lcrypto", "-lz", "-lcares", "-lre2",
            "-pthread"]
    os.execvp(args[0], args)


if __name__ == "__main__":
    main(sys.argv[1:])
