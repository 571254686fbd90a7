"""benchmarks/bench_cpu.py --quick runs to the end (every table, every quick configuration, the decode step, every
target) and writes its record, which the benchmarks page renders; its pieces: the multiply-adds behind the
machine's limit, the targets' verdicts, the renderer on old and new records; and bench_reference_revisions.py
runs a revision of the reference backend beside the working tree.

It needs torch and onnxruntime (the test and oracle extras), which CI installs: no skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rnn_testing import load_module

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "bench_cpu.py"
#: the committed records of bench_cpu.py written before the limit and the decode step existed (no "limit")
OLD_RECORDS = sorted(path for path in (REPO / "benchmarks" / "results").glob("cpu_*.json")
                     if "limit" not in json.loads(path.read_text()))


def load_bench_cpu() -> ModuleType:
    """The script as a module, for its tables, configurations and targets."""
    return load_module(SCRIPT)


def load_renderer() -> ModuleType:
    """docs/_ext/benchmark_records.py, the benchmarks page's renderer."""
    return load_module(REPO / "docs" / "_ext" / "benchmark_records.py")


def test_quick_run_prints_every_table_configuration_and_target(tmp_path: Path) -> None:
    bench_cpu = load_bench_cpu()
    assert any(bench.inputs != bench.hidden and bench.dropout for bench in bench_cpu.QUICK)
    assert any(bench.mode == "gru" and bench.bidirectional for bench in bench_cpu.QUICK)
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--warmup", "0",
                             "--decode-repeats", "3", "--record", "--results", str(tmp_path)], cwd=REPO,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    decode_title, decode_columns = bench_cpu.DECODE_TABLE
    for title, columns in [*bench_cpu.TABLES.items(), bench_cpu.DECODE_TABLE]:
        assert title in lines, (title, result.stdout)
        header = lines[lines.index(title) + 1]
        assert header.startswith("configuration") and all(name in header for name, _ in columns), header
    for bench in bench_cpu.QUICK:  # a row in each table
        rows = [line for line in lines if line.startswith(bench.name() + " ")]
        assert len(rows) == len(bench_cpu.TABLES), (bench.name(), result.stdout)
    assert lines[lines.index(decode_title) + 3].startswith(bench_cpu.DECODE_NAME + " ")
    assert any(line.startswith("machine limit: float32 sgemm 2048 x 2048 x 2048") for line in lines), result.stdout
    describe = load_module(REPO / "benchmarks" / "_cpu_report.py").describe
    for target in bench_cpu.TARGETS.values():  # the limit targets bound none of the quick configurations
        text = describe(target)
        outcomes = [line[len(text) + 4:] for line in lines if line.startswith(f"  {text}: ")]
        assert len(outcomes) == 1 and outcomes[0].startswith(("met", "NOT met", "not measured")), (text, outcomes)

    record = json.loads(next(tmp_path.glob("cpu_*_quick.json")).read_text())
    assert record["limit"]["gflops"] > 0 and record["limit"]["m"] == 2048
    assert set(record["targets"]) == set(bench_cpu.TARGETS) <= set(record["targets_met"])
    assert record["targets_met"]["train_vs_limit"] is None  # not measured: no large LSTM in --quick
    assert record["decode"]["name"] == bench_cpu.DECODE_NAME and record["decode"]["repeats"] == 3
    for row in record["results"]:
        assert row["train_limit_ms"] > 0 and row["ratio_limit"] == row["train_ours_ms"] / row["train_limit_ms"]
    read = load_renderer().read_records(tmp_path)[0]
    titles = [table.title for table in read.tables]
    assert any(title.startswith("decode step") for title in titles), titles
    assert "ours/limit" in read.tables[0].headers


def test_a_revision_of_the_reference_backend_runs_beside_the_working_tree() -> None:
    """bench_reference_revisions.py loads _reference (and _cells) as they are at HEAD, checks that both
    compute the same step and times them."""
    bench_cpu = load_bench_cpu()
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_reference_revisions.py"), "HEAD",
                             "--quick", "--repeats", "1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for bench in bench_cpu.QUICK:
        assert any(line.startswith(bench.name() + " ") for line in result.stdout.splitlines()), result.stdout


def load_cpu_load() -> ModuleType:
    """benchmarks/_cpu_load.py as a module."""
    return load_module(REPO / "benchmarks" / "_cpu_load.py")


def test_the_competing_process_runs_inside_the_block_and_is_gone_after_an_error() -> None:
    cpu_load = load_cpu_load()
    try:
        with cpu_load.competing_process(settle=0.2) as process:
            assert process.poll() is None  # running
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert process.poll() is not None  # stopped and waited for


def test_the_example_settings_differ_only_in_the_thread_variables() -> None:
    cpu_load = load_cpu_load()
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "2", "CUDNN_RNN_NUM_THREADS": "3"}
    default, one = (cpu_load.child_environment(base, setting) for setting in cpu_load.SETTINGS)
    for name in cpu_load.THREAD_VARIABLES:
        assert name not in default
    assert one["OMP_NUM_THREADS"] == one["OPENBLAS_NUM_THREADS"] == "1"
    assert default["PATH"] == one["PATH"] == "/bin"


# ---- the multiply-adds behind the machine's limit ----------------------------------------------------------
def test_the_limit_counts_the_floors_multiply_adds_as_written_out_by_hand() -> None:
    """GRU bi T=3 B=2 I=5 H=4 L=2: G*N = 12, P = 4, T*B = 6; a product [m, k] @ [k, n] is m*k*n multiply-adds."""
    bench_cpu = load_bench_cpu()
    floor = load_module(REPO / "benchmarks" / "_cpu_floor.py")
    bench = bench_cpu.Bench("gru", 3, 2, 4, layers=2, bidirectional=True, input_size=5)
    layer0 = 6 * 5 * 12 + 3 * (2 * 4 * 12)  # x @ W.T ([6, 5] @ [5, 12]) and T of h @ R.T ([2, 4] @ [4, 12])
    layer1 = 6 * 8 * 12 + 3 * (2 * 4 * 12)  # its input: both directions of layer 0, width 8
    forward = 2 * (layer0 + layer1)  # two directions
    backward = 2 * sum(3 * (2 * 12 * 4) + 6 * 12 * width + 12 * 6 * width + 12 * 6 * 4  # dh, dx, dW, dR
                       for width in (5, 8))
    assert (forward, backward) == (3024, 6048)
    assert floor.multiply_adds(bench, backward=False) == forward
    assert floor.multiply_adds(bench, backward=True) == forward + backward
    # an LSTM of one layer: G*N = 16, [6, 5] @ [5, 16] and 2 x [3, 4] @ [4, 16] forward
    assert floor.multiply_adds(bench_cpu.Bench("lstm", 2, 3, 4, input_size=5), backward=False) == 480 + 384
    for bench in bench_cpu.BENCHES:  # the FLOP count of the anchors: 2 per multiply-add, forward + backward
        assert bench.flops() == 2 * floor.multiply_adds(bench, backward=True), bench.name()
    assert floor.limit_ms(10**9, 100.0) == pytest.approx(20.0)  # 2e9 FLOPs at 100 GFLOP/s


# ---- the targets -----------------------------------------------------------------------------------------
def configuration_row(name: str, **ratios: float) -> dict[str, Any]:
    """A row of ``name`` meeting every target (its bounds' figures included), but for ``ratios``."""
    row = dict(name=name, ratio_torch=0.8, ratio_ort=0.8, ratio_limit=1.2, infer_ratio_limit=1.2, memory_ratio=1.2,
               train_floor_ms=60.0, train_torch_ms=100.0, train_limit_ms=50.0, infer_floor_ms=20.0,
               infer_ort_ms=40.0, infer_limit_ms=16.0, reserve_bytes=100, activation_bytes=100)
    return {**row, **ratios}


def test_the_targets_bound_the_ratios_the_brief_names() -> None:
    bench_cpu = load_bench_cpu()
    large, mid, tagger = (bench.name() for bench in (bench_cpu.LSTM_512, bench_cpu.LSTM_256, bench_cpu.BENCHES[4]))
    verdicts = bench_cpu.row_verdicts
    targets = bench_cpu.TARGETS
    everything = {"train_vs_torch", "inference_vs_ort", "train_vs_limit", "inference_vs_limit", "memory"}
    assert verdicts(targets, configuration_row(large)) == dict.fromkeys(everything, True)
    # ours/torch: 0.85 on every configuration, 0.95 on the large LSTM; a limit is met at equality
    assert verdicts(targets, configuration_row(large, ratio_torch=0.95))["train_vs_torch"]
    assert not verdicts(targets, configuration_row(large, ratio_torch=0.96))["train_vs_torch"]
    assert verdicts(targets, configuration_row(tagger, ratio_torch=0.85))["train_vs_torch"]
    assert not verdicts(targets, configuration_row(tagger, ratio_torch=0.9))["train_vs_torch"]
    assert not verdicts(targets, configuration_row(tagger, ratio_ort=0.91))["inference_vs_ort"]
    assert not verdicts(targets, configuration_row(tagger, memory_ratio=1.31))["memory"]
    # ours/limit: 1.35 on the two large LSTMs, reported only on the others
    assert not verdicts(targets, configuration_row(mid, infer_ratio_limit=1.36))["inference_vs_limit"]
    assert not verdicts(targets, configuration_row(large, ratio_limit=1.36))["train_vs_limit"]
    reported_only = verdicts(targets, configuration_row(tagger, ratio_limit=9.0, infer_ratio_limit=9.0))
    assert reported_only == dict.fromkeys(everything - {"train_vs_limit", "inference_vs_limit"}, True)
    # the decode step: ours/torch <= 0.7, and no configuration's target bounds its row
    assert verdicts(targets, dict(name=bench_cpu.DECODE_NAME, decode_ratio_torch=0.7)) == {"decode_vs_torch": True}
    assert verdicts(targets, dict(name=bench_cpu.DECODE_NAME, decode_ratio_torch=0.71)) == {"decode_vs_torch": False}


def test_a_missed_target_is_printed_with_its_bound_and_an_unbound_one_as_not_measured(
        capsys: pytest.CaptureFixture[str]) -> None:
    bench_cpu = load_bench_cpu()
    describe = load_module(REPO / "benchmarks" / "_cpu_report.py").describe
    tagger = bench_cpu.BENCHES[4].name()
    rows = [configuration_row(bench_cpu.LSTM_512.name(), infer_ratio_limit=1.5),
            configuration_row(tagger, ratio_torch=0.9)]
    summary = bench_cpu.print_targets(bench_cpu.TARGETS, rows)
    assert summary == dict(train_vs_torch=False, inference_vs_ort=True, train_vs_limit=True, inference_vs_limit=False,
                           decode_vs_torch=None, memory=True)
    assert rows[1]["bound_train_vs_torch"] == 0.6 and rows[0]["bound_inference_vs_limit"] == 1.25
    lines = capsys.readouterr().out.splitlines()
    targets = bench_cpu.TARGETS
    assert f"  {describe(targets['train_vs_torch'])}: NOT met (missed by {tagger} (its GEMM floor alone / torch " \
           "0.60))" in lines
    assert f"  {describe(targets['decode_vs_torch'])}: not measured (none of its configurations ran)" in lines
    assert f"  {describe(targets['memory'])}: met" in lines
    assert describe(targets["train_vs_torch"]) == \
        f"training float32: ours/torch <= 0.85 ({bench_cpu.LSTM_512.name()}: <= 0.95)"
    assert describe(targets["train_vs_limit"]) == (f"training float32: ours/limit <= 1.35 on "
                                                   f"{bench_cpu.LSTM_512.name()}, {bench_cpu.LSTM_256.name()} "
                                                   "(the others reported only)")


# ---- the benchmarks page ---------------------------------------------------------------------------------
def tables_of(record: Any) -> dict[str, Any]:
    """A record's tables by the first words of their titles."""
    return {" ".join(table.title.split()[:2]): table for table in record.tables}


def test_old_records_render_without_the_limit_and_the_decode_step(tmp_path: Path) -> None:
    renderer = load_renderer()
    assert OLD_RECORDS
    for path in OLD_RECORDS:
        shutil.copy(path, tmp_path)
    for record in renderer.read_records(tmp_path):
        assert record.kind is renderer.KINDS["cpu"], record.name
        tables = tables_of(record)
        training = tables["float32 training"]
        assert "ours/torch" in training.headers and "ours/limit" not in training.headers, record.name
        assert "decode step" not in tables and "the machine's" not in tables, record.name
        assert len(training.rows) == len(json.loads((tmp_path / record.name).read_text())["results"])
        assert renderer.write_plot(record, tmp_path / "plots") is not None


def test_a_new_record_renders_its_limit_and_decode_step(tmp_path: Path) -> None:
    bench_cpu = load_bench_cpu()
    renderer = load_renderer()
    large = configuration_row(bench_cpu.LSTM_512.name(), infer_ratio_limit=1.5)
    large.update(train_ours_ms=120.0, train_limit_ms=100.0, ratio_limit=1.2, infer_ours_ms=30.0, infer_limit_ms=20.0,
                 train_multiply_adds=4 * 10**10, infer_multiply_adds=10**10, cells="numpy")
    decode = dict(name=bench_cpu.DECODE_NAME, decode_ours_ms=0.105, decode_torch_ms=0.21, decode_ort_ms=0.07,
                  decode_ratio_torch=0.5, decode_ratio_ort=1.5, repeats=1000, cells="fused")
    record = dict(date="2027-01-02T03:04:05+00:00", environment=dict(machine="x86_64", cores=2),
                  limit=dict(m=2048, k=2048, n=2048, gflops=123.4, median_ms=139.2, threads=2, repeats=5),
                  targets=bench_cpu.targets_record(bench_cpu.TARGETS), results=[large], decode=decode,
                  targets_met=dict(train_vs_torch=True, inference_vs_limit=False, decode_vs_torch=True,
                                   train_vs_limit=None), decode_repeats=1000, repeats=5)
    (tmp_path / "cpu_20270102T030405.json").write_text(json.dumps(record))
    (read,) = renderer.read_records(tmp_path)
    tables = tables_of(read)
    training = tables["float32 training"]
    assert dict(zip(training.headers, training.rows[0]))["limit ms"] == "100.0"
    assert dict(zip(training.headers, training.rows[0]))["ours/limit"] == "1.20"
    inference = tables["float32 inference"]
    assert dict(zip(inference.headers, inference.rows[0]))["ours/limit"] == "1.50"
    assert tables["decode step"].rows == [[bench_cpu.DECODE_NAME, "0.105", "0.210", "0.070", "0.50", "1.50", "1000"]]
    assert ["GFLOP/s", "123.4"] in tables["the machine's"].rows
    outcomes = {row[0]: row[1:] for row in tables["targets"].rows}
    assert outcomes["decode_vs_torch"] == ["decode step: ours/torch <= 0.7", "met"]
    assert outcomes["inference_vs_limit"][1] == "not met" and outcomes["train_vs_limit"][1] == "not measured"
    assert outcomes["memory"] == ["memory: peak / cuDNN MB <= 1.3", ""]
    assert "--decode-repeats 1000" in read.command
    assert renderer.write_plot(read, tmp_path / "plots") is not None
