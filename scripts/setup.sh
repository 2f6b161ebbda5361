#!/usr/bin/env bash
# Installs what kfs needs on a fresh Debian machine, skipping whatever is already there:
# FUSE 3 (and its headers, for building pyfuse3), a C compiler, OpenSSL's libcrypto headers (the
# cleaner's MD5), Intel ISA-L's (the stream renderer's CRC-32C) and the Python headers (pip
# builds kfs's compiled code, storage/records/_c/*.pyx and kfs/spark/_*.pyx, with Cython), the shell tools
# the tests drive, and a virtualenv at .venv with kfs and its Python dependencies. Pass "test" to add the test tools
# and the PySpark data source's dependencies (pyspark, pyarrow, and a Java runtime if none);
# pass "spark" for the data source alone.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
debs=(fuse3 libfuse3-dev pkg-config gcc attr libssl-dev libisal-dev)
[ "$extras" = test ] && debs+=(xxd jq less rsync)
# Kafka's own jars (the tests' broker and tools), Spark's Kafka source (the peer of format("kfs"))
# and S3Proxy (their S3 server) come from Maven Central through Maven.
[ "$extras" = test ] && ! command -v mvn >/dev/null 2>&1 && debs+=(maven)
# Spark runs on a JVM: install one only when no java is on the PATH.
if [ "$extras" = test ] || [ "$extras" = spark ]; then
  command -v java >/dev/null 2>&1 || debs+=(openjdk-17-jre-headless)
fi

python=${PYTHON:-python3}
# The Python headers the codec's build needs: Debian's python3-dev for Debian's own python3.
"$python" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || debs+=(python3-dev)

# Each step that runs says so as it starts, with what takes long, and how long it took; a run with
# nothing to do prints nothing. The tools' full output goes to .cache/setup/ (shown on failure).
say() { echo "kfs setup: $*" >&2; }
started=$SECONDS
took() { local s=$((SECONDS - started)); say "  done in $((s / 60)) min $((s % 60)) s"; started=$SECONDS; }
logs=.cache/setup
# run_logged LOG FILTER CMD...: CMD's output to LOG, its lines FILTER prints as they come; on a
# failure the log's last lines and its path
run_logged() {
  local out="$1" filter="$2"; shift 2
  mkdir -p "$logs"
  if ! "$@" 2>&1 | tee -a "$out" | "$filter"; then
    tail -n 25 "$out" >&2
    say "failed: $* (its whole output: $out)"
    exit 1
  fi
}
# apt-get: a line per package set up (dpkg's "Setting up", as it goes)
apt_progress() {
  local line
  while IFS= read -r line; do
    case "$line" in "Setting up "*) line="${line#Setting up }"; say "  set up ${line%% *}" ;; esac
  done
}

missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing system packages with apt-get: ${missing[*]} (with what they depend on: about a minute on a fresh machine, more with a Java runtime)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  say "  apt-get update"
  rm -f "$logs/apt.log"
  run_logged "$logs/apt.log" apt_progress $sudo apt-get update -q
  run_logged "$logs/apt.log" apt_progress $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  took
fi

if [ ! -x .venv/bin/python ]; then
  say "creating the virtualenv .venv ($python -m venv: a few seconds)"
  "$python" -m venv .venv
  took
fi
# Reinstall only when the package definition or the compiled code changed since the last install.
stamp=".venv/.kfs-installed${extras:+-$extras}"
# the test install holds everything the plain one has: a mount after the tests reinstalls nothing
[ -z "$extras" ] && [ -f .venv/.kfs-installed-test ] && [ ! -f "$stamp" ] && stamp=.venv/.kfs-installed-test
pip_extras="$extras"
[ "$extras" = test ] && pip_extras="test,spark"  # the Spark tests run in CI too
# pip (-v, for the build's own lines): a line per download, per phase of kfs's build (the build
# tools, Cython's translation, each module's C compile, the slow part) and the final install
pip_progress() {
  local raw line names file version
  while IFS= read -r raw; do
    line="${raw#"${raw%%[![:space:]]*}"}"  # (pip indents what its sub-processes print)
    case "$line" in
      "Downloading "*)  # (a wheel's name-version-tags.whl as name-version)
        names="${line#Downloading }"; file="${names%% *}"; version="${file#*-}"
        [ "${file%.whl}" = "$file" ] || file="${file%%-*}-${version%%-*}"
        say "  downloading $file ${names#* }" ;;
      "Installing build dependencies: started") say "  fetching the build tools (setuptools, Cython)" ;;
      "["*"] Cythonizing "*) say "  Cython: ${line#*Cythonizing } ${line%% *}" ;;
      "Building editable for "*": started") say "  building kfs's compiled modules" ;;
      "building '"*"' extension") names="${line#building ?}"; say "  compiling ${names%?' extension'} (gcc -O3)" ;;
    esac
    case "$raw" in  # (pip's own lines, not the build's)
      "Installing collected packages: "*)
        names="${raw#Installing collected packages: }"; names="${names//[^,]/}"
        say "  installing $(( ${#names} + 1 )) packages into .venv" ;;
    esac
  done
  return 0
}
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
   || [ -n "$(find storage kfs \( -name '*.pyx' -o -name '*.pxd' \) -newer "$stamp" -print -quit)" ]; then
  say "installing kfs${pip_extras:+ [$pip_extras]} and its Python packages into .venv with pip: about a minute on a fresh 2-core machine${pip_extras:+ and more to download (pyspark is 400 MB)}, most of it compiling kfs's record codec (Cython, then gcc -O3 of 6 modules, one per core); again only when pyproject.toml, setup.py or a .pyx changes"
  say "  upgrading pip"
  rm -f "$logs/pip.log"
  run_logged "$logs/pip.log" pip_progress .venv/bin/python -m pip install --upgrade pip
  run_logged "$logs/pip.log" pip_progress .venv/bin/python -m pip install -v -e ".${pip_extras:+[$pip_extras]}"
  touch "$stamp"
  took
fi

# fetch_jars NAME WHAT SIZE: the jars of scripts/NAME/pom.xml and their dependencies, fetched with
# Maven once into .cache/NAME (ignored by git, Maven's repository beside them); again only when
# the pom changes.
fetch_jars() {
  local dir=".cache/$1" pom="scripts/$1/pom.xml"
  if [ ! -f "$dir/.fetched" ] || [ "$pom" -nt "$dir/.fetched" ]; then
    say "fetching $2 with Maven into $dir ($3)"
    rm -rf "$dir/lib"
    # (Maven 3.8 writes ANSI resets even in batch mode: stripped, so logs read plainly)
    mvn -q -B -f "$pom" dependency:copy-dependencies \
      -DoutputDirectory="$PWD/$dir/lib" -Dmaven.repo.local="$PWD/$dir/m2" 2>&1 \
      | sed 's/\x1b\[[0-9;]*m//g' >&2
    touch "$dir/.fetched"
    took
  fi
}
if [ "$extras" = test ]; then
  # the tests' Kafka peer, the pinned release; Spark's Kafka source, the peer of a Spark read;
  # the tests' S3 API server, one self-contained jar
  fetch_jars kafka "Kafka's jars" "about 55 MB, and the first time Maven's own plugins: a minute or two"
  fetch_jars spark-kafka "Spark's Kafka source" "about 70 MB, most of it Hadoop's client, which pyspark ships too"
  fetch_jars s3proxy "S3Proxy's jar" "one jar of about 50 MB"
fi
