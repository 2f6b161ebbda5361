"""The compiled record codec (``storage/records/_codec.pyx``), built by ``pip install``.

Everything else is in pyproject.toml. ``KFS_SANITIZE=address`` builds it with
AddressSanitizer (scripts/asan.sh); ``KFS_FUZZ=1`` adds libFuzzer's coverage
instrumentation for atheris (scripts/fuzz.sh).
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

flags = ["-O3"]
link = []
if os.environ.get("KFS_SANITIZE") == "address":
    flags = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address"]
    link = ["-fsanitize=address"]
if os.environ.get("KFS_FUZZ"):
    flags += ["-fsanitize=fuzzer-no-link"]

# libcrypto: OpenSSL's MD5 for the cleaner's offset map (Kafka hashes keys with MD5)
codec = Extension("storage.records._codec", ["storage/records/_codec.pyx"], libraries=["crypto"],
                  extra_compile_args=flags, extra_link_args=link)
setup(ext_modules=cythonize([codec], compiler_directives={"language_level": 3}))
