"""The compiled twins of the record codec (``storage/records/_c/*.pyx``) and of the Spark
writer (``kfs/spark/_*.pyx``), built by ``pip install``.

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

# libcrypto: OpenSSL's MD5 for the cleaner's offset map (Kafka hashes keys with MD5); libisal:
# Intel ISA-L's CRC-32C for the stream renderer's loop without the GIL
LIBRARIES = {"storage.records._c.compaction": ["crypto"], "storage.records._c.columns": ["isal"]}
MODULES = ["storage.records._c.buffers", "storage.records._c.records", "storage.records._c.columns",
           "storage.records._c.scan", "storage.records._c.compaction", "kfs.spark._partitioner"]
extensions = [Extension(name, [name.replace(".", "/") + ".pyx"], libraries=LIBRARIES.get(name, []),
                        extra_compile_args=flags, extra_link_args=link) for name in MODULES]
# the modules are translated and compiled side by side, one per core (gcc -O3 of the codec is
# most of a fresh install's time)
jobs = os.cpu_count() or 1
setup(ext_modules=cythonize(extensions, include_path=["."], nthreads=jobs,
                            compiler_directives={"language_level": 3}),
      options={"build_ext": {"parallel": jobs}})
