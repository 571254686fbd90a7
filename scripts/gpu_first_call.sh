#!/usr/bin/env bash
# The first command on a GPU machine: everything that matters most, in one call of at most 540 s, each
# answer in $OUT as soon as it exists. Installs nothing and needs no MPI.
#
#   bash scripts/gpu_first_call.sh
#
# Phases, most important first; each after phase 0 is a process of its own under its own `timeout`, so a
# crash (a segfault in cuDNN, say) or a hang costs that phase alone:
#   environment  nvidia-smi -L, then Python, NumPy, CuPy, CUDA, cuDNN (as the library finds it), JAX and
#                PyTorch versions (scripts/gpu_record.py environment). Without a usable CuPy and cuDNN the
#                script stops here with one STOP line and exit status 3, in seconds.
#   smoke        scripts/gpu_smoke.py: every mode in float64 and float32 against the reference, padding,
#                reserve, CUDA-graph capture, the layout grid and layout.UNCONFIRMED; cuDNN's own log of
#                warnings and errors (CUDNN_LOGLEVEL_DBG=2, to stderr) on for this phase only
#   core         pytest: tests/gpu/test_backend.py, test_padding_gpu.py, test_layout_cudnn.py
#   jax          pytest: tests/gpu/test_jax_gpu.py (the JAX bridge's CUDA path)
#   torch        pytest: tests/gpu/test_torch_gpu.py (the PyTorch bridge's CUDA path)
#   rest         pytest: the other tests/gpu files, as time allows
# The pytest phases leave out the long and sanitizer tests, the MPI/NCCL ones and persist_dynamic's NVRTC
# builds: `scripts/gpu_check.sh` runs those in later calls (its header has the plan).
#
# $OUT (a fresh temporary folder when unset) receives at most 8 files, flat:
#   summary.txt   one line per phase as it ends: name, exit status, seconds, pytest counts or a note
#   environment.txt, smoke.log, core.log, jax.log, torch.log, rest.log
#                 each phase's output; a log keeps its first 12 MiB and last 2 MiB (summary.txt says so)
#   record.md     the record to commit under benchmarks/results/ (date, commit, versions, every phase's
#                 counts and failing tests), rewritten after every phase
# Exit status: 0 when every phase passed, 3 when phase 0 stopped it, 1 otherwise.
#
# Environment: PYTHON (default python3), OUT, BUDGET (seconds for the whole run, default 500: each phase's
# limit shrinks to what is left, less 20 s for the records, and a phase that would get less than its
# minimum is not started), PHASE_LIMIT (seconds, overrides every phase's own limit).
set -u
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-python3}
out=${OUT:-$(mktemp -d -t cudnn_rnn_gpu_first_call.XXXXXX)}
budget=${BUDGET:-500}
mkdir -p "$out" || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-${TMPDIR:-/tmp}/cudnn_rnn_cupy_cache}"  # kernels compile once, for all
export MPLBACKEND=Agg PYTHONUNBUFFERED=1 CUDNN_RNN_REQUIRE_GPU=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
summary="$out/summary.txt"
head_bytes=$((12 * 1024 * 1024))
tail_bytes=$((2 * 1024 * 1024))
scratch=$(mktemp -d -t cudnn_rnn_first_call_scratch.XXXXXX) || exit 2
trap 'rm -rf "$scratch"' EXIT
failed=0
: > "$summary"
echo "== GPU first call: findings in $out"

note() {  # note NAME STATUS SECONDS DETAIL: one line of summary.txt, also printed
    local line
    line=$(printf '%-12s exit %-4s %5s s  %s' "$1" "$2" "$3" "$4")
    echo "$line" >> "$summary"
    echo "== $line"
}

counts() {  # counts LOG: pytest's counts from its -v lines, or the smoke's PASS/FAIL lines
    local kind
    if grep -Eq '::[^ ]+ (PASSED|FAILED|ERROR|SKIPPED)' "$1"; then
        for kind in PASSED FAILED ERROR SKIPPED; do
            printf '%s %s  ' "$(grep -Ec "::[^ ]+ $kind" "$1")" "${kind,,}"
        done
    elif grep -Eq '^(PASS|FAIL) ' "$1"; then
        printf '%s passed  %s failed  ' "$(grep -Ec '^PASS ' "$1")" "$(grep -Ec '^FAIL ' "$1")"
    fi
}

record() {  # rewrite record.md from what $OUT holds now
    timeout 20 "$python" scripts/gpu_record.py first-call "$out" > /dev/null 2>&1 || echo "(record.md not written)"
}

run_phase() {  # run_phase NAME MINIMUM LIMIT COMMAND...: bounded, logged, one line in summary.txt
    local name=$1 minimum=$2 limit=${PHASE_LIMIT:-$3} log="$out/$1.log" begin rc bytes kept cut=""
    shift 3
    local left=$((budget - SECONDS - 20))  # SECONDS: bash's seconds since the script started
    if [ "$left" -lt "$minimum" ]; then
        note "$name" "-" 0 "not run: ${left} s of BUDGET=$budget left, it needs $minimum"
        failed=1
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    echo "== $name (limit $limit s): $*"
    begin=$SECONDS
    # the log keeps its first and last bytes; head and tail read to the end, so the phase never gets SIGPIPE
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee >(wc -c > "$scratch/$name.bytes") \
        | { head -c "$head_bytes"; tail -c "$tail_bytes"; } > "$log"
    rc=${PIPESTATUS[0]}
    for _ in 1 2 3 4 5 6 7 8 9 10; do  # wc's count comes from a process substitution that may end a little later
        [ -s "$scratch/$name.bytes" ] && break
        sleep 0.2
    done
    bytes=$(cat "$scratch/$name.bytes" 2> /dev/null || echo 0)
    kept=$(wc -c < "$log")
    [ "$bytes" -gt "$kept" ] && cut="log cut: $bytes bytes, its first 12 MiB and last 2 MiB kept  "
    case $rc in
        0) ;;
        124 | 137) cut="timed out at $limit s  $cut"; failed=1 ;;
        *) failed=1 ;;
    esac
    [ "$rc" -gt 128 ] && [ "$rc" -ne 137 ] && cut="killed by signal $((rc - 128))  $cut"
    note "$name" "$rc" "$((SECONDS - begin))" "$(counts "$log")$cut"
    record
}

# ---- phase 0: the machine, in seconds ----------------------------------------------------------------
begin=$SECONDS
{
    echo "nvidia-smi -L:"
    timeout 20 nvidia-smi -L 2>&1 || echo "(no nvidia-smi, or it failed: exit $?)"
    timeout 60 "$python" scripts/gpu_record.py environment 2>&1
} > "$out/environment.txt"
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
note environment 0 "$((SECONDS - begin))" "$(grep -E '^GPU: ' "$out/environment.txt")"
record

# ---- phases 1-5, most important first ----------------------------------------------------------------
pytest=("$python" -m pytest -v -p no:cacheprovider -rfE --durations=10)
"$python" -c "import pytest_timeout" > /dev/null 2>&1 && pytest+=(--timeout=120)
not_here=(-m "not long and not sanitizer")
run_phase smoke 30 150 env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "$python" scripts/gpu_smoke.py
run_phase core 30 150 "${pytest[@]}" "${not_here[@]}" tests/gpu/test_backend.py tests/gpu/test_padding_gpu.py \
    tests/gpu/test_layout_cudnn.py
run_phase jax 30 100 "${pytest[@]}" "${not_here[@]}" tests/gpu/test_jax_gpu.py
run_phase torch 30 100 "${pytest[@]}" "${not_here[@]}" tests/gpu/test_torch_gpu.py
run_phase rest 30 400 "${pytest[@]}" "${not_here[@]}" -k "not persist_dynamic" tests/gpu \
    --ignore=tests/gpu/test_backend.py --ignore=tests/gpu/test_padding_gpu.py \
    --ignore=tests/gpu/test_layout_cudnn.py --ignore=tests/gpu/test_jax_gpu.py \
    --ignore=tests/gpu/test_torch_gpu.py --ignore=tests/gpu/test_distributed_gpu.py

# ---- what comes back first: the summary, and the end of every failed phase's log ---------------------
echo
echo "== summary ($out/summary.txt)"
cat "$summary"
while read -r name _ rc _; do
    if [ "$name" != environment ] && [ "$rc" != 0 ] && [ -f "$out/$name.log" ]; then
        echo
        echo "== $name: the last 30 lines of $name.log"
        tail -n 30 "$out/$name.log"
    fi
done < "$summary"
exit "$failed"
