#!/usr/bin/env bash
# Builds attnkit CPU-only, installs it into a temporary prefix, and checks that a small consumer
# (tests/consumer) builds and runs against it: find_package(attnkit CONFIG) + attnkit::attnkit, the
# pkg-config file, the installed RUNPATH, and FetchContent of the source tree (attnkit as a subproject:
# no tests, benchmarks or CLI). Usage: tests/consumer/run.sh [attnkit-build-dir]
# (default: a fresh folder under /tmp, removed at the end unless ATTNKIT_CONSUMER_KEEP=1).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${ATTNKIT_CONSUMER_JOBS:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/attnkit-consumer.XXXXXX")
build=${1:-$work/attnkit-build}
prefix=$work/prefix
if [ "${ATTNKIT_CONSUMER_KEEP:-0}" != "1" ]; then trap 'rm -rf "$work"' EXIT; fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

passed=0 failed=0
# check <name> <command...>: runs the command with its output in a log, printed only when it fails.
check() {
  local name=$1; shift
  local log="$work/$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
  if "$@" >"$log" 2>&1; then
    passed=$((passed + 1)); echo "consumer: ok   $name"
  else
    failed=$((failed + 1)); echo "consumer: FAIL $name"; sed 's/^/    /' "$log" | tail -n 60
  fi
}

build_attnkit() {
  cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DATTNKIT_WITH_CUDA=OFF \
    -DATTNKIT_BUILD_TESTS=OFF -DATTNKIT_BUILD_BENCHMARKS=OFF -DCMAKE_INSTALL_PREFIX="$prefix" "${launcher[@]}" &&
    cmake --build "$build" -j "$jobs" && cmake --install "$build"
}
installed_files() {
  local d=$prefix/lib/cmake/attnkit
  ls "$d/attnkitConfig.cmake" "$d/attnkitConfigVersion.cmake" "$d/attnkitTargets.cmake" \
    "$prefix/lib/pkgconfig/attnkit.pc" "$prefix/include/attnkit/attnkit.hpp" "$prefix"/lib/libattnkit.so* &&
    # Consumers need neither nlohmann_json nor OpenMP nor CUDA headers: the export names none of them.
    ! grep -E "nlohmann|OpenMP" "$d"/attnkitTargets*.cmake
}
installed_runpath() {
  if ! command -v readelf >/dev/null 2>&1; then echo "readelf not installed: not checked"; return 0; fi
  readelf -d "$prefix/bin/attnkit" | grep -E "RUNPATH|RPATH" | tee /dev/stderr | grep -F '$ORIGIN/../lib' &&
    ! readelf -d "$prefix/bin/attnkit" | grep -E "RUNPATH|RPATH" | grep -F "$build" &&
    # An empty entry (":::" padding) would make the loader search the current directory.
    ! readelf -d "$prefix/bin/attnkit" "$prefix/lib/libattnkit.so" | grep -E "RUNPATH|RPATH" | grep -E '\[:|::|:\]' &&
    "$prefix/bin/attnkit" --help
}
# The C++ headers refuse C++17 with a message that names the C ABI header; that header compiles as C99.
header_standards() {
  local cxx=${CXX:-c++} cc=${CC:-cc}
  printf '#include <attnkit/attnkit.hpp>\nint main() { return 0; }\n' >"$work/cxx17.cpp"
  printf '#include <attnkit/attnkit.h>\nint main(void) { return attnkit_abi_version() > 0 ? 0 : 1; }\n' >"$work/c99.c"
  if "$cxx" -std=c++17 -fsyntax-only -I"$prefix/include" "$work/cxx17.cpp" 2>"$work/cxx17.err"; then
    echo "C++17 compiled the C++ headers; expected an error"; return 1
  fi
  grep -F "need C++20" "$work/cxx17.err" &&
    "$cc" -std=c99 -Wall -Werror -I"$prefix/include" "$work/c99.c" -L"$prefix/lib" -lattnkit -o "$work/c99" &&
    LD_LIBRARY_PATH="$prefix/lib" "$work/c99"
}
consumer_find_package() {
  cmake -S "$repo/tests/consumer" -B "$work/consumer-installed" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DATTNKIT_CONSUMER_MODE=find_package -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" &&
    cmake --build "$work/consumer-installed" -j "$jobs" && "$work/consumer-installed/attnkit_consumer"
}
consumer_pkg_config() {
  if ! command -v pkg-config >/dev/null 2>&1; then echo "pkg-config not installed: not checked"; return 0; fi
  local flags
  flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs attnkit) || return 1
  echo "pkg-config --cflags --libs attnkit: $flags"
  # shellcheck disable=SC2086
  ${CXX:-c++} -std=c++20 "$repo/tests/consumer/main.cpp" $flags -Wl,-rpath,"$prefix/lib" -o "$work/consumer-pc" &&
    "$work/consumer-pc"
}
consumer_fetchcontent() {
  local b=$work/consumer-fetchcontent
  cmake -S "$repo/tests/consumer" -B "$b" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DATTNKIT_CONSUMER_MODE=fetchcontent -DATTNKIT_SOURCE_DIR="$repo" "${launcher[@]}" &&
    cmake --build "$b" -j "$jobs" && "$b/attnkit_consumer" || return 1
  # As a subproject attnkit builds no tests, benchmarks or CLI, and no CUDA unless asked.
  local extra
  extra=$(find "$b" \( -name attnkit_tests -o -name 'bench_*' -o -path '*/tools/attnkit' \) -type f)
  if [ -n "$extra" ]; then echo "subproject built targets it should not have: $extra"; return 1; fi
  grep -E "^ATTNKIT_(BUILD_TESTS|BUILD_BENCHMARKS|BUILD_CLI|WITH_CUDA):" "$b/CMakeCache.txt"
  [ "$(grep -c -E '^ATTNKIT_(BUILD_TESTS|BUILD_BENCHMARKS|BUILD_CLI|WITH_CUDA):[A-Z]+=OFF$' "$b/CMakeCache.txt")" = 4 ]
}

start=$SECONDS
check "build + install attnkit (CPU-only)" build_attnkit
if [ "$failed" -eq 0 ]; then
  check "installed config, version, targets and .pc files" installed_files
  check "installed CLI RUNPATH \$ORIGIN/../lib" installed_runpath
  check "find_package(attnkit) consumer builds and runs" consumer_find_package
  check "pkg-config --cflags --libs attnkit consumer builds and runs" consumer_pkg_config
  check "C++17 gets a clear error from the C++ headers; the C ABI header builds as C99" header_standards
fi
check "FetchContent consumer (subproject: no tests/benchmarks/CLI) builds and runs" consumer_fetchcontent
echo "consumer: $passed passed, $failed failed ($((SECONDS - start)) s)"
[ "$failed" -eq 0 ]
