#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian 12 x86_64 machine, builds
# the runtime for every supported target, and runs the whole test suite (unit tests, the host
# end-to-end tests, and the qemu-user tests of the other architectures). Nothing is skipped:
# a missing tool fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# -- Debian packages ------------------------------------------------------------------------
packages=(
    gcc g++ libc6-dev binutils make python3 time  # host toolchain (g++: C++ exception tests), gprof, GNU time
    musl-tools                                    # musl-gcc for the musl routes
    qemu-user                                     # runs the foreign-architecture tests
    clang                                         # clang -pg fixtures (call-graph tests)
    libclang-rt-14-dev                            # compiler-rt's XRay runtime (xray-sys route)
    llvm                                          # llvm-xray reads exported XRay logs
    valgrind                                      # callgrind: exact reference call counts
    golang-go                                     # go tool pprof reads --format pprof
    python3-venv                                  # Perfetto's schema, in target/export-python
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
    g++-aarch64-linux-gnu                         # C++ exceptions under trace mode (aarch64)
    gcc-riscv64-linux-gnu libc6-dev-riscv64-cross binutils-riscv64-linux-gnu
    g++-riscv64-linux-gnu                         # C++ exceptions under trace mode (riscv64)
    gcc-s390x-linux-gnu libc6-dev-s390x-cross binutils-s390x-linux-gnu
    g++-s390x-linux-gnu                           # C++ exceptions through s390x trace frames
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" \
        || die "cannot install ${missing[*]}"
fi
for tool in gcc g++ gprof musl-gcc clang llvm-xray valgrind go qemu-aarch64 qemu-riscv64 qemu-s390x /usr/bin/time \
            aarch64-linux-gnu-gcc aarch64-linux-gnu-gprof aarch64-linux-gnu-g++ \
            riscv64-linux-gnu-gcc riscv64-linux-gnu-gprof riscv64-linux-gnu-g++ \
            s390x-linux-gnu-gcc s390x-linux-gnu-gprof s390x-linux-gnu-g++; do
    command -v "$tool" >/dev/null || die "$tool is still missing after installing packages"
done

# -- Rust toolchains and targets ------------------------------------------------------------
command -v rustup >/dev/null || die "rustup is required (https://rustup.rs)"
# One pinned nightly for every instrumented fixture: the one the suite was tested with. Its
# rustc says 2026-10-29; it has -Zinstrument-mcount=fentry, #[instrument_fn] and rustc's -pg
# link (nightlies from 2026-07-01 on). The tests and scripts/instrument-flags read
# INSTRFN_NIGHTLY.
export INSTRFN_NIGHTLY=${INSTRFN_NIGHTLY:-nightly-2026-10-30}
if ! rustup run "$INSTRFN_NIGHTLY" rustc --version >/dev/null 2>&1; then
    say "installing $INSTRFN_NIGHTLY (instrumented fixtures need -Zinstrument-mcount)"
    rustup toolchain install "$INSTRFN_NIGHTLY" --profile minimal \
        || die "cannot install $INSTRFN_NIGHTLY"
fi
stable_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-gnu riscv64gc-unknown-linux-gnu
                s390x-unknown-linux-gnu)
nightly_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-gnu)
installed=$(rustup target list --installed)
for t in "${stable_targets[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t" || die "cannot add target $t"
done
# rust-src: `cargo instrfn --build-std` instruments the standard library too.
rustup "+$INSTRFN_NIGHTLY" component list --installed | grep -q '^rust-src' \
    || rustup component add rust-src --toolchain "$INSTRFN_NIGHTLY" \
    || die "cannot add rust-src to $INSTRFN_NIGHTLY"
installed=$(rustup "+$INSTRFN_NIGHTLY" target list --installed)
for t in "${nightly_targets[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup "+$INSTRFN_NIGHTLY" target add "$t" \
        || die "cannot add $INSTRFN_NIGHTLY target $t"
done
scripts/instrument-flags mcount >/dev/null || die "$INSTRFN_NIGHTLY cannot instrument (see above)"

# -- Build the runtime for every target -----------------------------------------------------
say "building the runtime (stable): host, musl, aarch64, riscv64, s390x"
cargo build --release --locked
for t in "${stable_targets[@]}"; do
    if [ "$t" = aarch64-unknown-linux-gnu ]; then
        # The whole workspace, as a user cross-building types it: its libinstrfn.so must link
        # libc whatever features the CLI's dependencies turn on (tests/linking.rs).
        cargo build --release --locked --target "$t"
    else
        cargo build --release --locked --target "$t" -p instrfn -p instrfn-preload
    fi
done
# The benchmarks check that their calls are counted before they time anything: run those
# checks (criterion's --test mode runs each benchmark once).
# The bench binary links the runtime, which writes its profile at exit: keep it in target/.
GMON_OUT_PREFIX=target/bench-gmon cargo bench --locked --bench trampoline -- --test

# -- Consumers of the export formats (tests/export_formats.rs) -----------------------------
# `go tool pprof` (Debian's golang-go) reads --format pprof. Perfetto's own schema (the
# `perfetto` package's perfetto_trace_pb2, read by `protobuf`) reads --format perfetto, through
# scripts/check-perfetto.py. Both Python packages go into a virtual environment in
# target/export-python, made with the python3 on PATH: the test runs that environment's python3.
# (golang-go and python3-venv are in the package list above.)
export_python=target/export-python/bin/python3
if ! "$export_python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
    say "installing perfetto and protobuf (PyPI) into target/export-python"
    rm -rf target/export-python
    python3 -m venv target/export-python || die "python3 -m venv failed (python3-venv?)"
    "$export_python" -m pip install -q perfetto==0.59.1 protobuf==7.36.2 \
        || die "cannot install perfetto and protobuf"
    "$export_python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' \
        || die "perfetto_trace_pb2 does not import"
fi
export INSTRFN_EXPORT_PYTHON="$PWD/$export_python"

# -- Tests ----------------------------------------------------------------------------------
say "running the tests"
cargo test --release --locked -- --test-threads=2
# The runtime's unit tests on the other architectures (prologue decoders, call-site caches),
# under qemu-user: .cargo/config.toml names the runners.
for t in aarch64-unknown-linux-gnu riscv64gc-unknown-linux-gnu s390x-unknown-linux-gnu; do
    cargo test --release --locked --target "$t" -p instrfn --lib
done
# The compiler-rt XRay packages are not default members (they need clang and compiler-rt):
# their own tests (tests/xray_crt.rs, above, builds the fixture that links them).
cargo test --release --locked -p xray-sys -p instrfn-xray -- --test-threads=2
cargo test --release --locked -p xray-sys --features basic,fdr   # the modes link and register
say "all tests passed"
