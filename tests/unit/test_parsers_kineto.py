"""Kineto trace parser against the three HTA sample traces."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfmodel.calibrate.parsers import busbw_factor, classify_kernel, parse_kineto_trace
from perfmodel.errors import InputError

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
KINETO = DATA / "traces" / "kineto"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data folder absent")


def _raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.parametrize("name,expected", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", ("nccl", "all_reduce")),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "reduce_scatter")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ("nccl", "send_recv")),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", ("gemm", None)),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", ("gemm", None)),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", ("gemm", None)),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)", ("gemm", None)),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>", ("attention", None)),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<>>>>", ("attention", None)),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", ("attention", None)),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", ("attention", None)),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>", ("other", None)),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>", ("other", None)),
])
def test_classify_kernel(name, expected):
    assert classify_kernel(name) == expected


def test_memory_by_category():
    assert classify_kernel("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy") == ("memory", None)
    assert classify_kernel("Memset (Device)", "gpu_memset") == ("memory", None)


@needs_data
def test_sampled_rank0_matches_hta_breakdown():
    s = parse_kineto_trace(KINETO / "hta_timeline_analysis_sampled_rank-0.json")
    # HTA's own breakdown of this file (REFERENCES.md §3b): comm 0.396 s, compute 0.210 s,
    # memory 0.0013 s.
    assert s.kernel_time_s["nccl"] == pytest.approx(0.396, abs=5e-4)
    compute = s.kernel_time_s["gemm"] + s.kernel_time_s["attention"] + s.kernel_time_s["other"]
    assert compute == pytest.approx(0.210, abs=5e-4)
    assert s.kernel_time_s["memory"] == pytest.approx(0.0013, abs=5e-5)
    assert s.nccl_time_s.keys() == {"send_recv"} and s.kernel_count["nccl"] == 10
    assert s.step_time_s == {551: pytest.approx(0.607312), 552: pytest.approx(0.622928)}
    assert s.device_name is None and s.world_size == 128 and s.nccl_collectives.empty


@needs_data
@pytest.mark.parametrize("name", ["hta_critical_path_alexnet_a100_trace.json",
                                  "hta_nccl_parser_config_nccl_data.json.gz",
                                  "hta_timeline_analysis_sampled_rank-0.json"])
def test_totals_equal_all_gpu_events(name):
    events = _raw_events(KINETO / name)
    gpu = [e for e in events if e.get("ph") == "X"
           and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    s = parse_kineto_trace(KINETO / name)
    assert sum(s.kernel_count.values()) == len(gpu)
    assert sum(s.kernel_time_s.values()) == pytest.approx(sum(e["dur"] for e in gpu) * 1e-6)
    nccl = [e for e in gpu if e["name"].startswith("nccl")]
    assert s.kernel_time_s["nccl"] == pytest.approx(sum(e["dur"] for e in nccl) * 1e-6)


@needs_data
def test_alexnet_device_and_gemms():
    s = parse_kineto_trace(KINETO / "hta_critical_path_alexnet_a100_trace.json")
    assert s.device_name == "NVIDIA A100-PG509-200"
    assert s.kernel_count["nccl"] == 0 and s.kernel_count["memory"] == 19  # 16 memcpy + 3 memset
    assert s.kernel_count["gemm"] > 0 and s.step_time_s == {}


@needs_data
def test_nccl_metadata_gives_bandwidths():
    s = parse_kineto_trace(KINETO / "hta_nccl_parser_config_nccl_data.json.gz")
    df = s.nccl_collectives
    assert df["collective"].value_counts().to_dict() == {"all_reduce": 15, "broadcast": 6}
    assert s.device_name == "NVIDIA A100-PG509-200" and s.world_size == 2
    assert sorted(s.step_time_s) == [4, 5, 6]
    assert s.step_time_s[4] == pytest.approx(0.222442191)
    first = df.iloc[0]  # args: In msg nelems 6637568, Float, dur 2636.669 us, Group size 2
    assert first["bytes"] == 6637568 * 4 and first["group_size"] == 2
    assert first["dur_s"] == pytest.approx(2636.669e-6)
    assert first["algbw_gb_per_s"] == pytest.approx(6637568 * 4 / 2636.669e-6 / 1e9)
    ratio = df["busbw_gb_per_s"] / df["algbw_gb_per_s"]
    expected = [busbw_factor(c, g) for c, g in zip(df["collective"], df["group_size"])]
    assert ratio.tolist() == pytest.approx(expected)
    longs = df[df["dtype"] == "Long"]
    assert len(longs) == 3  # broadcasts of int64 buffers: 8 bytes per element


def test_truncated_json_names_file_and_line():
    with pytest.raises(InputError, match=r"kineto_truncated\.json:\d+: trace: not JSON"):
        parse_kineto_trace(FIXTURES / "kineto_truncated.json")


def test_missing_trace_events():
    with pytest.raises(InputError, match=r"kineto_no_events\.json:1: traceEvents"):
        parse_kineto_trace(FIXTURES / "kineto_no_events.json")


def test_not_gzip(tmp_path):
    fake = tmp_path / "trace.json.gz"
    fake.write_text("{}")
    with pytest.raises(InputError, match=r"trace\.json\.gz:1"):
        parse_kineto_trace(fake)


# ---- wrong-typed or impossible fields: one InputError naming file, line and event field ------
_GEMM = {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "ts": 1, "dur": 10.0}
_NCCL_ARGS = {"Collective name": "allreduce", "dtype": "Float", "Group size": 8,
              "In msg nelems": 10, "Out msg nelems": 10}


def _trace(tmp_path, events, **top) -> Path:
    """A pretty-printed trace (one key per line), a good GEMM event first."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [_GEMM, *events], **top}, indent=1))
    return path


def _nccl(**args):
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ts": 2,
            "dur": 10.0, "args": {**_NCCL_ARGS, **args}}


@pytest.mark.parametrize("event,field", [
    ({**_GEMM, "dur": "abc"}, "traceEvents[1].dur"),          # was ValueError float()
    ({**_GEMM, "dur": None}, "traceEvents[1].dur"),           # was TypeError
    ({**_GEMM, "dur": True}, "traceEvents[1].dur"),
    ({**_GEMM, "dur": -1000}, "traceEvents[1].dur"),          # was summed as negative time
    ({**_GEMM, "dur": float("nan")}, "traceEvents[1].dur"),   # json writes NaN; was accepted
    ({**_GEMM, "dur": float("inf")}, "traceEvents[1].dur"),
    ({k: v for k, v in _GEMM.items() if k != "dur"}, "traceEvents[1].dur"),
    ({**_GEMM, "name": 5}, "traceEvents[1].name"),            # was TypeError in re
    ({**_GEMM, "cat": ["kernel"]}, "traceEvents[1].cat"),     # was unhashable list
    ({**_GEMM, "args": [1, 2]}, "traceEvents[1].args"),
    ({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "dur": "x"},
     "traceEvents[1].dur"),                                   # was ValueError float()
    (_nccl(**{"Group size": "eight"}), "traceEvents[1].args.Group size"),
    (_nccl(**{"Group size": -2}), "traceEvents[1].args.Group size"),
    (_nccl(**{"In msg nelems": "many"}), "traceEvents[1].args.In msg nelems"),
    (_nccl(**{"Out msg nelems": 1.5}), "traceEvents[1].args.Out msg nelems"),
    (_nccl(dtype=7), "traceEvents[1].args.dtype"),
    (_nccl(**{"Collective name": None}), "traceEvents[1].args.Collective name"),
])
def test_bad_event_field_names_file_line_and_field(tmp_path, event, field):
    path = _trace(tmp_path, [event])
    with pytest.raises(InputError) as exc:
        parse_kineto_trace(path)
    assert exc.value.field == field
    # the line is where the bad event's "{" is: the second event of the pretty-printed list
    starts = [n for n, text in enumerate(path.read_text().splitlines(), start=1) if text == "  {"]
    assert exc.value.where == f"{path}:{starts[1]}"


@pytest.mark.parametrize("top,field", [
    ({"deviceProperties": {"name": "x"}}, "deviceProperties"),     # was KeyError 0
    ({"deviceProperties": ["x"]}, "deviceProperties"),
    ({"deviceProperties": [{"name": 5}]}, "deviceProperties[0].name"),
    ({"distributedInfo": [1]}, "distributedInfo"),                 # was AttributeError
    ({"distributedInfo": {"world_size": "8"}}, "distributedInfo.world_size"),
    ({"distributedInfo": {"world_size": 0}}, "distributedInfo.world_size"),
])
def test_bad_top_level_metadata(tmp_path, top, field):
    with pytest.raises(InputError, match=r"t\.json:1: ") as exc:
        parse_kineto_trace(_trace(tmp_path, [], **top))
    assert exc.value.field == field


@pytest.mark.parametrize("events", [
    [],                                                            # traceEvents: [] wrote a profile
    [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 5.0}],
    [{"ph": "M", "name": "process_name", "args": {"name": "x"}}],
])
def test_trace_without_gpu_or_step_events_is_rejected(tmp_path, events):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(InputError, match=r"t\.json:1: traceEvents: no GPU kernel"):
        parse_kineto_trace(path)


def test_valid_metadata_and_zero_duration_kernels_still_parse(tmp_path):
    s = parse_kineto_trace(_trace(
        tmp_path, [{**_GEMM, "dur": 0}, _nccl(), _nccl(**{"Group size": 0}), {"ph": "i", "dur": "n/a"}],
        deviceProperties=[{"name": "NVIDIA H100"}], distributedInfo={"world_size": 8}))
    assert s.kernel_count == {"gemm": 2, "attention": 0, "nccl": 2, "memory": 0, "other": 0}
    assert len(s.nccl_collectives) == 1 and s.device_name == "NVIDIA H100" and s.world_size == 8


def test_events_not_summarised_are_not_checked_and_old_category_spellings_count(tmp_path):
    """CPU-side events may carry durations older profilers wrote negative or none at all: a trace is
    not rejected for events it does not summarise; PyTorch 1.8/1.9 spell the GPU categories Kernel,
    Memcpy and Memset."""
    s = parse_kineto_trace(_trace(tmp_path, [
        {"ph": "X", "cat": "python_function", "name": "f", "dur": -3},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": None},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "dur": 20.0},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "dur": 3.0},
    ]))
    assert s.kernel_count["gemm"] == 2 and s.kernel_count["memory"] == 1
    assert s.kernel_time_s["memory"] == pytest.approx(3e-6)


@needs_data
def test_calibrate_reports_the_profiler_step_times(tmp_path):
    """calibrate's summary of a trace gives its ProfilerStep#N durations (and records them), as the collection
    kit's README says: the nccl-data trace has steps #4..#6, median 0.222 s."""
    from typer.testing import CliRunner

    from perfmodel.cli import app

    trace = KINETO / "hta_nccl_parser_config_nccl_data.json.gz"
    res = CliRunner().invoke(app, ["calibrate", "--trace", str(trace), "--gpu", "a100-sxm4-80gb",
                                   "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1  # nothing fitted from a trace: summarised, no profile
    assert "3 profiler steps (ProfilerStep#4..#6): median 0.2224 s per step" in res.output


def _op(ext, name, dims, types, ts=0.0):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 5.0,
            "args": {"External id": ext, "Input Dims": dims, "Input type": types}}


def _kernel(ext, dur_us, name="nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", key="External id"):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 10.0, "dur": dur_us, "args": {key: ext}}


def test_recorded_matmuls_each_op_its_operands_and_kernels(tmp_path):
    """record_shapes=True: mm (A, B), addmm (bias, A, B), bmm / baddbmm (batched), _scaled_mm (fp8): each
    (m, k) x (k, n) timed by the sum of the kernels with its External id (split-K's reduce too); an op with
    no kernel, another dtype or no dims is left out; PyTorch 1.8/1.9 kernels spell the key in lower case."""
    bf, fp8 = "c10::BFloat16", "c10::Float8_e4m3fn"
    events = [
        _op(1, "aten::mm", [[64, 32], [32, 16]], [bf, bf]), _kernel(1, 100.0),
        _op(2, "aten::addmm", [[16], [64, 32], [32, 16], [], []], ["c10::Half", "c10::Half", "c10::Half", "Scalar", "Scalar"]),
        _kernel(2, 70.0), _kernel(2, 30.0, name="splitKreduce_kernel"),
        _op(3, "aten::bmm", [[4, 64, 32], [4, 32, 16]], [bf, bf]), _kernel(3, 50.0, key="external id"),
        _op(4, "aten::baddbmm", [[4, 64, 16], [4, 64, 32], [4, 32, 16], [], []], ["float", "float", "float", "", ""]),
        _kernel(4, 40.0),
        _op(5, "aten::_scaled_mm", [[128, 64], [64, 32], [], []], [fp8, fp8, "float", "float"]), _kernel(5, 20.0),
        _op(6, "aten::mm", [[64, 32], [32, 16]], [bf, bf]),  # no kernel of its own: not timed, left out
        _op(7, "aten::mm", [[64, 32], [32, 16]], ["c10::ComplexFloat", "c10::ComplexFloat"]), _kernel(7, 9.0),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 1.0, "args": {"External id": 8}},
        _kernel(8, 9.0),
    ]
    g = parse_kineto_trace(_trace(tmp_path, events)).gemm_ops.set_index("op")
    assert list(g.index) == ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"]
    assert g.loc["aten::mm", ["m", "n", "k", "batch"]].tolist() == [64, 16, 32, 1]
    assert g.loc["aten::addmm", ["m", "n", "k", "dtype"]].tolist() == [64, 16, 32, "fp16"]
    assert g.loc["aten::addmm", "time_s"] == pytest.approx(100e-6)  # the GEMM and its split-K reduction
    assert g.loc["aten::bmm", ["m", "n", "k", "batch", "dtype"]].tolist() == [64, 16, 32, 4, "bf16"]
    assert g.loc["aten::baddbmm", "dtype"] == "fp32" and g.loc["aten::baddbmm", "batch"] == 4
    assert g.loc["aten::_scaled_mm", ["m", "n", "k", "dtype"]].tolist() == [128, 32, 64, "fp8"]


def test_recorded_matmuls_that_do_not_multiply_name_their_event(tmp_path):
    events = [_op(1, "aten::bmm", [[4, 64, 32], [2, 32, 16]], ["c10::BFloat16"] * 2), _kernel(1, 10.0)]
    with pytest.raises(InputError, match=r"traceEvents\[1\]\.args\.Input Dims: aten::bmm operands .* do not multiply"):
        parse_kineto_trace(_trace(tmp_path, events))


@pytest.mark.parametrize("op,field,rule", [
    (_op("545", "aten::mm", [[64, 32], [32, 16]], ["c10::BFloat16"] * 2), "External id", "must be a whole number"),
    (_op(5, "aten::mm", "64x32", ["c10::BFloat16"] * 2), "Input Dims", "must be a list of operand shapes"),
    (_op(5, "aten::mm", [[64, 32], [32, 16]], "c10::BFloat16"), "Input type", "must name the type"),
    (_op(5, "aten::mm", [[64, 32], [32, 16]], ["c10::BFloat16", "c10::Float8_e4m3fn"]), "Input type",
     "aten::mm.s operands are of two precisions"),
])
def test_a_recorded_matmul_in_the_wrong_form_is_an_error_not_a_dropped_row(tmp_path, op, field, rule):
    with pytest.raises(InputError, match=rf"traceEvents\[1\]\.args\.{field}: {rule}"):
        parse_kineto_trace(_trace(tmp_path, [op, _kernel(5, 10.0)]))


def test_two_matmul_ops_with_one_external_id_are_refused(tmp_path):
    """Two profiling sessions' events in one file restart their ids: whose kernels are whose is unknown."""
    events = [_op(1, "aten::mm", [[64, 32], [32, 16]], ["c10::BFloat16"] * 2), _kernel(1, 10.0),
              _op(1, "aten::mm", [[128, 32], [32, 16]], ["c10::BFloat16"] * 2), _kernel(1, 20.0)]
    with pytest.raises(InputError, match=r"traceEvents\[3\]\.args\.External id: 1 is already the id of traceEvents\[1\]"):
        parse_kineto_trace(_trace(tmp_path, events))


@pytest.mark.parametrize("name, category", [
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1", "gemm"),  # hipBLASLt / Tensile
    ("Cijk_Ailk_Bjlk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x64", "gemm"),
    ("aiter::fmha_bwd_hd64_bf16_causal_a16_rtne_recompile", "attention"),
    ("attn_fwd", "attention"), ("_attn_bwd", "attention"),  # Triton attention
    ("triton_poi_fused_add_attn_0", "other"), ("void at::native::vectorized_elementwise_kernel<4>", "other"),
])
def test_rocm_kernel_names_are_classified(name, category):
    """A ROCm trace's GEMMs and Triton attention were summed as 'other'."""
    assert classify_kernel(name)[0] == category
