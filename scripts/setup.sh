#!/usr/bin/env bash
# Installs what kfs needs on a fresh Debian machine, skipping whatever is already there:
# FUSE 3 (and its headers, for building pyfuse3), a C compiler, OpenSSL's libcrypto headers (the
# cleaner's MD5) and the Python headers (pip
# builds kfs's compiled code, storage/records/_c/*.pyx and kfs/spark/_*.pyx, with Cython), the shell tools
# the tests drive, and a virtualenv at .venv with kfs and its Python dependencies. Pass "test" to add the test tools
# and the PySpark data source's dependencies (pyspark, pyarrow, and a Java runtime if none);
# pass "spark" for the data source alone.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
debs=(fuse3 libfuse3-dev pkg-config gcc attr libssl-dev)
[ "$extras" = test ] && debs+=(xxd jq less rsync)
# Kafka's own jars (the tests' broker and tools) and S3Proxy (their S3 server) come from Maven
# Central through Maven.
[ "$extras" = test ] && ! command -v mvn >/dev/null 2>&1 && debs+=(maven)
# Spark runs on a JVM: install one only when no java is on the PATH.
if [ "$extras" = test ] || [ "$extras" = spark ]; then
  command -v java >/dev/null 2>&1 || debs+=(openjdk-17-jre-headless)
fi

python=${PYTHON:-python3}
# The Python headers the codec's build needs: Debian's python3-dev for Debian's own python3.
"$python" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || debs+=(python3-dev)

missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kfs setup: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
# Reinstall only when the package definition or the compiled code changed since the last install.
stamp=".venv/.kfs-installed${extras:+-$extras}"
# the test install holds everything the plain one has: a mount after the tests reinstalls nothing
[ -z "$extras" ] && [ -f .venv/.kfs-installed-test ] && [ ! -f "$stamp" ] && stamp=.venv/.kfs-installed-test
pip_extras="$extras"
[ "$extras" = test ] && pip_extras="test,spark"  # the Spark tests run in CI too
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
   || [ -n "$(find storage kfs \( -name '*.pyx' -o -name '*.pxd' \) -newer "$stamp" -print -quit)" ]; then
  echo "kfs setup: installing Python packages into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".${pip_extras:+[$pip_extras]}"
  touch "$stamp"
fi

# The tests' Kafka peer: the pinned release's jars (scripts/kafka/pom.xml) and their dependencies,
# fetched once into .cache/kafka (ignored by git); again only when the pom changes.
if [ "$extras" = test ]; then
  kafka=.cache/kafka
  if [ ! -f "$kafka/.fetched" ] || [ scripts/kafka/pom.xml -nt "$kafka/.fetched" ]; then
    echo "kfs setup: fetching Kafka's jars with Maven into $kafka" >&2
    rm -rf "$kafka/lib"
    mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies \
      -DoutputDirectory="$PWD/$kafka/lib" -Dmaven.repo.local="$PWD/$kafka/m2" >&2
    touch "$kafka/.fetched"
  fi
  # The tests' S3 API server: S3Proxy's self-contained jar (scripts/s3proxy/pom.xml), fetched once
  # into .cache/s3proxy (ignored by git); again only when the pom changes.
  s3proxy=.cache/s3proxy
  if [ ! -f "$s3proxy/.fetched" ] || [ scripts/s3proxy/pom.xml -nt "$s3proxy/.fetched" ]; then
    echo "kfs setup: fetching S3Proxy's jar with Maven into $s3proxy" >&2
    rm -rf "$s3proxy/lib"
    mvn -q -B -f scripts/s3proxy/pom.xml dependency:copy-dependencies \
      -DoutputDirectory="$PWD/$s3proxy/lib" -Dmaven.repo.local="$PWD/$s3proxy/m2" >&2
    touch "$s3proxy/.fetched"
  fi
fi
