#!/usr/bin/env bash
# The main job, end to end, on the bundled example: build libinstrfn.so and the instrfn
# command, compile examples/c/sort.c with `gcc -pg` (linked without gcrt: glibc's profiler
# never runs), run it with LD_PRELOAD, and show what gprof makes of the gmon.out instrfn wrote;
# then trace the same binary with `instrfn record`, report where the time went per function,
# and draw a flame graph.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in cargo gcc gprof; do
    command -v "$tool" >/dev/null || { echo "demo.sh: $tool is not installed" >&2; exit 1; }
done
out=target/demo
mkdir -p "$out"
echo "== cargo build --release   (target/release/libinstrfn.so, target/release/instrfn)"
cargo build --release --quiet
echo "== gcc -O2 -pg -fno-inline examples/c/sort.c"
gcc -O2 -pg -fno-inline -c examples/c/sort.c -o "$out/sort.o"
gcc "$out/sort.o" -o "$out/sort" -lpthread
rm -f "$out/gmon.out"
echo "== LD_PRELOAD=target/release/libinstrfn.so INSTRFN_VERBOSE=1 ./sort"
(cd "$out" && LD_PRELOAD="$PWD/../release/libinstrfn.so" INSTRFN_VERBOSE=1 ./sort "${1:-2000000}")
echo "== gprof -b ./sort gmon.out"
gprof -b "$out/sort" "$out/gmon.out" | sed -n '1,60p'
echo "== target/release/instrfn record -o target/demo/trace -- ./sort 200000"
(cd "$out" && ../release/instrfn record -o trace -- ./sort 200000)
echo "== target/release/instrfn report target/demo/trace"
target/release/instrfn report "$out/trace"
echo "== target/release/instrfn export target/demo/trace --format svg -o target/demo/flame.svg"
target/release/instrfn export "$out/trace" --format svg -o "$out/flame.svg"
echo "flame graph: $out/flame.svg (open it in a browser); timeline: instrfn export --format chrome"
