#!/usr/bin/env bash
# Measure the CUDA runtime's occupancy answers on the local GPU (ground truth for tests/test_occupancy_measured.py).
#
#   bench/measure_occupancy.sh OUTDIR [ARCH]      # ARCH defaults to sm_90
#
# Builds tests/data/occupancy/occupancy_probe.cu with nvcc, runs it, and gzips the CSVs it writes into OUTDIR.
# Then `python bench/split_occupancy.py OUTDIR` splits the measured rows into the committed development and
# held-out files (see tests/data/occupancy/README.md).
set -euo pipefail
out=${1:?usage: measure_occupancy.sh OUTDIR [ARCH]}
arch=${2:-sm_90}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv > "$out/nvidia-smi.csv" || true
nvcc --version > "$out/nvcc-version.txt"
t0=$(date +%s)
nvcc -O2 -std=c++17 -arch="$arch" --split-compile=0 -Xptxas -v -o "$out/occupancy_probe" \
  "$here/tests/data/occupancy/occupancy_probe.cu" 2> "$out/ptxas.log"
echo "compiled in $(( $(date +%s) - t0 )) s"
"$out/occupancy_probe" "$out"
rm -f "$out/occupancy_probe"
gzip -9 -f "$out"/*.csv "$out/ptxas.log"
ls -l "$out"
