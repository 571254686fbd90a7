#!/usr/bin/env bash
# The GPU check of the cuDNN backend, one bounded stage per command. Installs nothing, except
# MPICH from a local wheel when asked to (MPICH_WHEEL_DIR, below). The first command on a new GPU machine
# is not this script but scripts/gpu_first_call.sh (the plan at the end of this header).
#
#   bash scripts/gpu_check.sh STAGE [STAGE ...]
#
# Stages, in the order to run them (each well inside 10 minutes on one H100):
#   smoke      scripts/gpu_smoke.py: versions, one forward/backprop per mode against the reference,
#              padding, reserve, CUDA graph, layout check (seconds; limit 180 s)
#   tests      pytest tests/gpu, except the long and sanitizer tests (limit 540 s)
#   long       pytest tests/gpu -m long: 10,000 calls, 8 threads on 8 streams (limit 540 s)
#   sanitizer  pytest tests/gpu -m sanitizer: compute-sanitizer memcheck (limit 540 s)
#   layout     scripts/check_layout.py over the whole grid, with cuDNN's answers (limit 180 s)
#   bench      benchmarks/bench_gpu.py against PyTorch's cuDNN RNNs (limit 540 s)
#   all        every stage above, one after the other (for a machine without a per-command limit)
#
# Each stage writes into $OUT/STAGE/ (OUT defaults to a fresh temporary folder): STAGE.log (all its
# output), STAGE.junit.xml (pytest stages), bench.json (bench), and record.md (date, commit, GPU,
# driver, CUDA, cuDNN, CuPy and PyTorch versions, the command, pass/fail counts or the benchmark
# table): the record to commit under benchmarks/results/. Every stage runs under `timeout`, so a
# hang still leaves its log and record. The exit status is 0 only when every stage passed.
#
# Environment: PYTHON (default python3), OUT, STAGE_TIMEOUT (seconds, overrides every stage's limit),
# PYTEST_ADDOPTS (pytest's own: e.g. "-k 'not layout'" to split the tests stage over two commands),
# BUDGET (seconds for the whole command: each stage's limit shrinks to what is left of it, less
# 30 s for the records, and a stage with under 60 s left is not started: its record says so),
# CUPY_CACHE_DIR (default: one folder under $TMPDIR shared by the stages, so kernels compile once).
# CUDNN_RNN_REQUIRE_GPU=1 is set for the stages: without a visible GPU the pytest stages fail
# instead of passing with every test skipped.
# MPICH_WHEEL_DIR: a folder holding an mpich wheel, for an offline machine whose mpi4py finds no MPI
# library (tests/gpu/test_distributed_gpu.py needs one, and mpiexec). When mpi4py cannot load an
# MPI, that wheel is installed once into $TMPDIR/cudnn_rnn_mpich and put on PATH and
# LD_LIBRARY_PATH for the stages. A missing or empty folder, or a wheel that does not install, costs
# one warning and nothing else: the stages run without MPI (the MPI tests then fail, and say why).
# Get the wheel on a machine with network access, into the checkout's git-ignored .gpu-wheels/ (bring
# that folder to the GPU machine with the checkout):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#       -d .gpu-wheels mpich==5.0.2
#
# The first GPU run, on a machine available for 15 minutes in all (its 1-2 minute start included): two
# commands, prepared beforehand, and the machine released as soon as each one returns.
#   Command 1 (a limit of 540 s): scripts/gpu_first_call.sh, which names the GPU and the versions, then
#   runs the smoke (cuDNN's own log of warnings and errors on, to stderr), the core GPU tests, the JAX
#   and the PyTorch CUDA paths and the rest of tests/gpu but the long, sanitizer and MPI tests, each
#   phase a process of its own with its own limit, its findings in $OUT as they come (its header):
#     bash scripts/gpu_first_call.sh
#   Then fix every failure at its root on the host, with a host test that would have caught it.
#   Command 2 (only with 4 minutes or more left; a limit of at most 240 s): the phase that failed, again
#   (PYTEST_ADDOPTS="-k ..." picks its tests); if command 1 was green, the layout grid, the MPI/NCCL
#   tests and persist_dynamic (NVRTC builds: marked long), with the mpich wheel brought along:
#     MPICH_WHEEL_DIR=.gpu-wheels CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr BUDGET=220 \
#       PYTEST_ADDOPTS="--timeout=120 -k 'distributed or persist_dynamic'" \
#       bash scripts/gpu_check.sh layout tests long
#   Commit command 1's record.md and summary.txt, and each stage's record.md, under benchmarks/results/
#   (commit the tree before the call: a copy without .git names its files' fingerprint, and
#   `python3 scripts/gpu_record.py find-commit record.md` here names the commit with those files),
#   and settle in the code what the run proved (layout.UNCONFIRMED, RESERVE_SURVIVES_BACKWARD,
#   CUDNN_IGNORES_PADDING, the bfloat16 math types). Later runs take the remaining stages one or two at
#   a time: bench, long, sanitizer.
set -u
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-python3}
out=${OUT:-$(mktemp -d -t cudnn_rnn_gpu_check.XXXXXX)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-${TMPDIR:-/tmp}/cudnn_rnn_cupy_cache}"
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 CUDNN_RNN_REQUIRE_GPU=1
stages=(smoke tests long sanitizer layout bench)

usage() {
    echo "usage: bash scripts/gpu_check.sh STAGE [STAGE ...]   (STAGE: ${stages[*]} all)" >&2
    exit 2
}

command_of() {  # command_of STAGE FOLDER: the stage's command line, one word per line
    local pytest=("$python" -m pytest tests/gpu -v -p no:cacheprovider --durations=15 -o junit_family=xunit2
                  --junitxml "$2/$1.junit.xml")
    case $1 in
        smoke) printf '%s\n' "$python" scripts/gpu_smoke.py ;;
        tests) printf '%s\n' "${pytest[@]}" -m "not long and not sanitizer" ;;
        long) printf '%s\n' "${pytest[@]}" -m long ;;
        sanitizer) printf '%s\n' "${pytest[@]}" -m sanitizer ;;
        layout) printf '%s\n' "$python" scripts/check_layout.py ;;
        bench) printf '%s\n' "$python" benchmarks/bench_gpu.py --json "$2/bench.json" ;;
        *) return 1 ;;
    esac
}

limit_of() {
    case $1 in
        smoke | layout) echo "${STAGE_TIMEOUT:-180}" ;;
        *) echo "${STAGE_TIMEOUT:-540}" ;;
    esac
}

run_stage() {  # run_stage STAGE: run it bounded, log it, write its record; returns its exit status
    local stage=$1 folder="$out/$1" limit rc begin words=()
    mkdir -p "$folder"
    mapfile -t words < <(command_of "$stage" "$folder")
    limit=$(limit_of "$stage")
    if [ -n "${BUDGET:-}" ]; then
        local left=$((BUDGET - SECONDS - 30))  # SECONDS: bash's seconds since this script started
        if [ "$left" -lt 60 ]; then
            printf '# GPU check, stage `%s`: not run (exit 3)\n\nBUDGET=%s s was spent before it could start.\n' \
                "$stage" "$BUDGET" > "$folder/record.md"
            echo "== $stage: not run, BUDGET=$BUDGET s is spent"
            return 3
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "== $stage (limit ${limit} s): ${words[*]}"
    begin=$(date +%s)
    timeout --kill-after=20 "$limit" "${words[@]}" 2>&1 | tee "$folder/$stage.log"
    rc=${PIPESTATUS[0]}
    "$python" scripts/gpu_record.py "$folder" "$stage" "$rc" "$(($(date +%s) - begin))" "$limit" -- "${words[@]}" \
        || echo "(could not write $folder/record.md)"
    echo "== $stage: exit $rc; log and record.md in $folder"
    return "$rc"
}

use_mpich_wheel() {  # an MPI for mpi4py from $MPICH_WHEEL_DIR when it has none; never stops the stages
    [ -n "${MPICH_WHEEL_DIR:-}" ] || return 0
    "$python" -c "from mpi4py import MPI" > /dev/null 2>&1 && return 0
    local prefix="${TMPDIR:-/tmp}/cudnn_rnn_mpich" wheels=("$MPICH_WHEEL_DIR"/mpich-*.whl)
    if [ ! -x "$prefix/bin/mpiexec" ]; then
        if [ ! -f "${wheels[0]}" ]; then
            echo "warning: MPICH_WHEEL_DIR=$MPICH_WHEEL_DIR holds no mpich-*.whl: the stages run without MPI" >&2
            return 0
        fi
        if ! timeout 120 "$python" -m pip install -q --no-index --no-deps --no-compile --prefix "$prefix" \
            "${wheels[0]}"; then
            echo "warning: ${wheels[0]} did not install: the stages run without MPI" >&2
            return 0
        fi
    fi
    export PATH="$prefix/bin:$PATH" LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "== MPI for mpi4py: MPICH from ${wheels[0]} in $prefix"
}

[ $# -ge 1 ] || usage
requested=()
for stage in "$@"; do
    if [ "$stage" = all ]; then
        requested+=("${stages[@]}")
    elif command_of "$stage" "$out" > /dev/null; then
        requested+=("$stage")
    else
        usage
    fi
done
mkdir -p "$out"
use_mpich_wheel
failed=0
for stage in "${requested[@]}"; do
    run_stage "$stage" || failed=1
done
exit "$failed"
