#!/usr/bin/env bash
# The first command on a GPU machine: everything that matters most, in one call of at most 540 s, each
# answer in $OUT as soon as it exists. Installs nothing and needs no MPI.
#
#   bash scripts/gpu_first_call.sh
#
# Phases, most important first; each after phase 0 is a process of its own under its own `timeout`, so a
# crash (a segfault in cuDNN, say) or a hang costs that phase alone:
#   environment  nvidia-smi -L and the driver version, then Python, NumPy, CuPy, CUDA (driver and runtime),
#                cuDNN as the library finds it, JAX, jaxlib and PyTorch (scripts/gpu_record.py environment;
#                versions from the packages' metadata, nothing heavy imported). Without a usable CuPy and
#                cuDNN the script stops here, in seconds, with one STOP line saying why and exit status 3.
#   smoke        scripts/gpu_smoke.py: every mode in float64 and float32 against the reference, padding,
#                reserve, CUDA-graph capture, the layout grid and layout.UNCONFIRMED; cuDNN's own log of
#                warnings and errors (CUDNN_LOGLEVEL_DBG=2, to stderr) on for this phase only
#   core         pytest: tests/gpu/test_backend.py, test_padding_gpu.py, test_layout_cudnn.py
#   jax          pytest: tests/gpu/test_jax_gpu.py (the JAX bridge's CUDA path)
#   torch        pytest: tests/gpu/test_torch_gpu.py (the PyTorch bridge's CUDA path)
#   rest         pytest: the other tests/gpu files, as time allows
# The pytest phases run `-v -rfE --durations=10 -m "not long and not sanitizer"` (rest: "... and not
# distributed", -k "not persist_dynamic", without test_distributed_gpu.py), with --timeout=120 per test
# when pytest-timeout is there: the long and sanitizer tests, the MPI/NCCL jobs and persist_dynamic's NVRTC
# builds are for `scripts/gpu_check.sh` in later calls (its header has the plan). Every phase runs with
# CUDNN_RNN_REQUIRE_GPU=1 (no GPU fails rather than skips), XLA_PYTHON_CLIENT_PREALLOCATE=false, one
# CUPY_CACHE_DIR (kernels compile once) and Python's faulthandler on: a phase cut at its limit gets SIGABRT
# first, so its log ends with every Python thread's stack (SIGKILL follows 10 s later); a crash's stack is
# in its log too.
#
# $OUT (a fresh temporary folder when unset) receives at most 8 files, flat:
#   summary.txt   one line per phase as it ends: name, exit status, seconds, pass/fail counts or a note
#                 (timed out, killed by a signal, log cut, not run)
#   environment.txt, smoke.log, core.log, jax.log, torch.log, rest.log
#                 each phase's output; a log keeps its first 12 MiB and last 2 MiB (summary.txt says so)
#   record.md     the record to commit under benchmarks/results/ (date, commit, versions, every phase's
#                 counts and failing tests), rewritten after every phase
# The output ends with every failed phase's last 30 log lines, then summary.txt.
# Exit status: 0 when every phase passed, 3 when phase 0 stopped it, 1 otherwise.
#
# Environment: PYTHON (default python3), OUT, BUDGET (seconds for the whole run, default 500: each phase's
# limit shrinks to what is left, less 30 s for the records, and a phase that would get less than 30 s is
# not started: summary.txt says so), PHASE_LIMIT (seconds, overrides every phase's own limit),
# CUDNN_RNN_COMMIT (the commit record.md names when the tree it runs in is a copy without .git; without it,
# record.md names the files' fingerprint, which `python3 scripts/gpu_record.py find-commit record.md` in the
# repository turns into the commit with those files).
set -u
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-python3}
out=${OUT:-$(mktemp -d -t cudnn_rnn_gpu_first_call.XXXXXX)}
budget=${BUDGET:-500}
margin=30    # seconds kept back from each phase's limit: timeout's --kill-after, its counts and record.md
minimum=30   # a phase that would get fewer seconds is not started
mkdir -p "$out" || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-${TMPDIR:-/tmp}/cudnn_rnn_cupy_cache}"  # kernels compile once, for all
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 CUDNN_RNN_REQUIRE_GPU=1 \
    XLA_PYTHON_CLIENT_PREALLOCATE=false
unset CUDNN_LOGLEVEL_DBG CUDNN_LOGDEST_DBG CUDNN_LOGINFO_DBG CUDNN_LOGWARN_DBG CUDNN_LOGERR_DBG  # the smoke's alone
ulimit -c 0  # a crash costs its phase, not minutes of writing a core file of a CUDA process
summary="$out/summary.txt"
head_bytes=$((12 * 1024 * 1024))
tail_bytes=$((2 * 1024 * 1024))
scratch=$(mktemp -d -t cudnn_rnn_first_call_scratch.XXXXXX) || exit 2
trap 'rm -rf "$scratch"' EXIT
failed=0
: > "$summary" || exit 2
echo "== GPU first call: findings in $out"

note() {  # note NAME STATUS SECONDS DETAIL: one line of summary.txt, also printed
    local line
    line=$(printf '%-12s exit %-4s %5s s  %s' "$1" "$2" "$3" "$4")
    line=${line%"${line##*[![:space:]]}"}  # without trailing blanks
    echo "$line" >> "$summary"
    echo "== $line"
}

record() {  # rewrite record.md from what $OUT holds now
    timeout 20 "$python" scripts/gpu_record.py first-call "$out" > /dev/null 2>&1 || echo "(record.md not written)"
}

run_phase() {  # run_phase NAME LIMIT COMMAND...: bounded, logged, one line in summary.txt, record.md anew
    local name=$1 limit=${PHASE_LIMIT:-$2} log="$out/$1.log" begin rc bytes kept counts detail=""
    shift 2
    local left=$((budget - SECONDS - margin))  # SECONDS: bash's seconds since the script started
    if [ "$left" -lt "$minimum" ]; then
        note "$name" "-" 0 "not run: ${left} s of BUDGET=$budget left (less $margin for the records), it needs $minimum"
        failed=1
        return  # record.md is written once more at the end
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    echo "== $name (limit $limit s): $*"
    begin=$SECONDS
    # Cut at its limit with SIGABRT, which makes Python (PYTHONFAULTHANDLER, pytest's faulthandler) print every
    # thread's stack into the log, then SIGKILL 10 s later. The log keeps its first 12 MiB and last 2 MiB;
    # head and tail read to the end, so the phase never gets SIGPIPE.
    timeout --signal=ABRT --kill-after=10 "$limit" "$@" < /dev/null 2>&1 | tee >(wc -c > "$scratch/$name.bytes") \
        | { head -c "$head_bytes"; tail -c "$tail_bytes"; } > "$log"
    rc=${PIPESTATUS[0]}
    for _ in 1 2 3 4 5 6 7 8 9 10; do  # wc's count comes from a process substitution that may end a little later
        [ -s "$scratch/$name.bytes" ] && break
        sleep 0.2
    done
    bytes=$(cat "$scratch/$name.bytes" 2> /dev/null || echo 0)
    kept=$(wc -c < "$log")
    [ "$rc" -ne 0 ] && failed=1
    if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ $((SECONDS - begin)) -ge "$limit" ]; }; then
        detail="timed out at $limit s  "  # 137: it outlived SIGABRT by 10 s
    elif [ "$rc" -gt 128 ]; then
        detail="killed by signal $((rc - 128))  "
    fi
    [ "${bytes:-0}" -gt "$kept" ] && detail+="log cut: $bytes bytes, its first 12 MiB and last 2 MiB kept  "
    counts=$(timeout 10 "$python" scripts/gpu_record.py counts "$log" 2> /dev/null)
    note "$name" "$rc" "$((SECONDS - begin))" "${counts:+$counts  }$detail"
    record
}

# ---- phase 0: the machine, in seconds ----------------------------------------------------------------
begin=$SECONDS
{
    echo "nvidia-smi -L:"
    timeout 15 nvidia-smi -L 2>&1 || echo "(no nvidia-smi, or it failed: exit $?)"
    timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null \
        | sed 's/^/nvidia-smi: /'
    timeout --kill-after=5 60 "$python" scripts/gpu_record.py environment 2>&1
} < /dev/null > "$out/environment.txt"
environment_rc=$?  # scripts/gpu_record.py's: 3 after its STOP line
if [ "$environment_rc" -ne 0 ] && ! grep -q '^STOP: ' "$out/environment.txt"; then
    echo "STOP: the versions could not be read (scripts/gpu_record.py environment: exit $environment_rc)" \
        >> "$out/environment.txt"
fi
cat "$out/environment.txt"
if [ "$environment_rc" -ne 0 ]; then
    note environment "$environment_rc" "$((SECONDS - begin))" "$(grep '^STOP: ' "$out/environment.txt" | head -n 1)"
    record
    exit 3
fi
note environment 0 "$((SECONDS - begin))" "$(grep -E '^GPU: ' "$out/environment.txt" | head -n 1)"
record

# ---- phases 1-5, most important first ----------------------------------------------------------------
pytest=("$python" -m pytest -v -p no:cacheprovider -rfE --durations=10)
"$python" -c "import pytest_timeout" > /dev/null 2>&1 && pytest+=(--timeout=120)
core_tests=(tests/gpu/test_backend.py tests/gpu/test_padding_gpu.py tests/gpu/test_layout_cudnn.py)
jax_tests=(tests/gpu/test_jax_gpu.py)
torch_tests=(tests/gpu/test_torch_gpu.py)
mpi_tests=(tests/gpu/test_distributed_gpu.py)  # MPI jobs without the `distributed` mark: a later call's
run_phase smoke 150 env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "$python" scripts/gpu_smoke.py
run_phase core 150 "${pytest[@]}" -m "not long and not sanitizer" "${core_tests[@]}"
run_phase jax 100 "${pytest[@]}" -m "not long and not sanitizer" "${jax_tests[@]}"
run_phase torch 100 "${pytest[@]}" -m "not long and not sanitizer" "${torch_tests[@]}"
run_phase rest 400 "${pytest[@]}" -m "not long and not sanitizer and not distributed" -k "not persist_dynamic" \
    tests/gpu "${core_tests[@]/#/--ignore=}" "${jax_tests[@]/#/--ignore=}" "${torch_tests[@]/#/--ignore=}" \
    "${mpi_tests[@]/#/--ignore=}"

record  # with the phases that were not run

# ---- what comes back first (the end of this output): every failed phase's last lines, then the summary --
while read -r name _ rc _; do
    if [ "$rc" != 0 ] && [ -f "$out/$name.log" ]; then
        echo
        echo "== $name: the last 30 lines of $name.log"
        tail -n 30 "$out/$name.log" | cut -c 1-240
    fi
done < "$summary"
echo
echo "== summary ($out/summary.txt; record.md beside it)"
cat "$summary"
exit "$failed"
