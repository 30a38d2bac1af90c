"""The operators as PyTorch sees them: schemas and fake kernels (opcheck), torch.compile, the
profiler, and decoding from many threads at once with the GIL released."""

import subprocess
import sys
import threading
import time

import pytest
import torch

import custom_op
from conftest import assert_op_raises
from custom_op import ImageReadMode


@pytest.fixture(scope="module")
def jpeg(jpeg_writer):
    return jpeg_writer.encode(jpeg_writer.photo_like(96, 128, seed=11), sampling="4:2:0")


def as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def options(mode=ImageReadMode.RGB, apply_exif_orientation=False, on_warning=0, max_pixels=0) -> dict:
    """The decoding options as the operators take them: by name."""
    return dict(
        mode=int(mode), apply_exif_orientation=apply_exif_orientation, on_warning=on_warning, max_pixels=max_pixels
    )


@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_opcheck_decode_and_crop(jpeg, mode):
    args = (as_tensor(jpeg), 5, 7, 40, 50)
    torch.library.opcheck(torch.ops.custom_op.decode_and_crop_jpeg.default, args, options(mode))


@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_opcheck_decode(jpeg, mode):
    kwargs = options(mode, apply_exif_orientation=True, on_warning=1)
    torch.library.opcheck(torch.ops.custom_op.decode_jpeg.default, (as_tensor(jpeg),), kwargs)


@pytest.mark.parametrize("stack", [False, True])
@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("mode", list(ImageReadMode))
def test_opcheck_batched_decode(jpeg, mode, whole, stack):
    """Without the AOT-dispatch checks: the messages are str[], which torch.compile leaves outside its
    graphs (test_torch_compile_runs_the_batched_call)."""
    data = [as_tensor(jpeg), as_tensor(jpeg)]
    windows = ([], [], [], []) if whole else ([0, 3], [1, 2], [30, 30], [40, 40])
    torch.library.opcheck(
        torch.ops.custom_op.decode_jpegs.default,
        (data, *windows),
        dict(whole=whole, stack=stack, **options(mode)),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


@pytest.mark.parametrize(
    "mode, resize_shorter, dtype, normalised",
    [
        (ImageReadMode.RGB, 0, 0, False),
        (ImageReadMode.RGB, 0, 1, True),
        (ImageReadMode.GRAY, 0, 3, True),
        (ImageReadMode.RGB, 100, 2, False),
        (ImageReadMode.UNCHANGED, 0, 0, False),
    ],
)
def test_opcheck_batched_resized_crop(jpeg, mode, resize_shorter, dtype, normalised):
    data = [as_tensor(jpeg), as_tensor(jpeg)]
    windows = ([], [], [], []) if resize_shorter else ([0, 3], [1, 2], [90, 30], [120, 40])
    channels = 1 if mode == ImageReadMode.GRAY else 3
    kwargs = dict(
        size=[24, 32],
        resize_shorter=resize_shorter,
        scale=0,
        filter=1,
        antialias=True,
        flips=[0, 1],
        mean=[0.5] * channels if normalised else [],
        std=[0.25] * channels if normalised else [],
        dtype=dtype,
        **options(mode),
    )
    torch.library.opcheck(
        torch.ops.custom_op.decode_and_resized_crop_jpegs.default,
        (data, *windows),
        kwargs,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


def test_options_travel_by_name_only(jpeg):
    """Every option is keyword-only in the schemas: a call that passes options by position fails
    instead of swapping neighbouring ints (on_warning and max_pixels, say)."""
    data = as_tensor(jpeg)
    for schema in torch._C._jit_get_all_schemas():
        if schema.name in (
            "custom_op::decode_and_crop_jpeg",
            "custom_op::decode_jpeg",
            "custom_op::decode_jpegs",
            "custom_op::decode_and_resized_crop_jpegs",
        ):
            named = {a.name for a in schema.arguments if a.kwarg_only}
            assert {"mode", "apply_exif_orientation", "on_warning", "max_pixels"} <= named, schema
    with pytest.raises(RuntimeError):
        torch.ops.custom_op.decode_and_crop_jpeg(data, 5, 7, 40, 50, int(ImageReadMode.RGB), False, 0, 0)
    out, _ = torch.ops.custom_op.decode_and_crop_jpeg(data, 5, 7, 40, 50, **options())
    assert torch.equal(out, custom_op.decode_and_crop_jpeg(jpeg, 5, 7, 40, 50))


@pytest.mark.parametrize(
    "bad, says",
    [
        (dict(mode=3), r"mode code must be 0 \(UNCHANGED\), 1 \(GRAY\) or 2 \(RGB\), got 3"),
        (dict(on_warning=-1), r"on_warning code must be 0 \(raise\), 1 \(warn\) or 2 \(ignore\), got -1"),
    ],
)
def test_option_codes_are_checked_by_every_kernel(jpeg, bad, says):
    """One check of the option codes (csrc/common/options.h) for the single, batched and GPU kernels."""
    data = as_tensor(jpeg)
    kwargs = {**options(), **bad}
    assert_op_raises(ValueError, says, torch.ops.custom_op.decode_and_crop_jpeg, data, 0, 0, 8, 8, **kwargs)
    assert_op_raises(ValueError, says, torch.ops.custom_op.decode_jpeg, data, **kwargs)
    batched = torch.ops.custom_op.decode_jpegs
    assert_op_raises(ValueError, says, batched, [data], [0], [0], [8], [8], whole=False, stack=False, **kwargs)
    resized = dict(size=[4, 4], resize_shorter=0, scale=0, filter=1, antialias=True, flips=[], mean=[], std=[], dtype=0)
    assert_op_raises(
        ValueError,
        says,
        torch.ops.custom_op.decode_and_resized_crop_jpegs,
        [data],
        [0],
        [0],
        [8],
        [8],
        **resized,
        **kwargs,
    )


def test_python_constants_are_the_libraries():
    """The codes and sizes Python shares with the C++ libraries (read modes, warning policies, item
    statuses, GPU path codes, the GPU outputs' alignment, the output dtypes) are the values the library exports: a value
    changed on one side fails here, on any machine, without a GPU."""
    from custom_op import _args, _device, _ops, _outcomes, _resample, gpu

    names, values = torch.ops.custom_op._constants()
    library = dict(zip(names, values))
    python = {f"read_mode.{m.name}": int(m) for m in ImageReadMode}
    python.update({f"on_warning.{name}": code for name, code in _args.ON_WARNING.items()})
    statuses = ("ok", "warned", "value_error", "type_error", "runtime_error")
    python.update({f"item_status.{name}": getattr(_outcomes, name.upper()) for name in statuses})
    python.update({f"path.{name}": code for code, name in gpu.PATH_NAMES.items()})
    python["path.segments_flag"] = gpu.SEGMENTS_FLAG
    python["output_alignment"] = _ops.OUTPUT_ALIGNMENT
    python.update(
        {f"output_dtype.{str(dtype).split('.')[-1]}": code for dtype, code in _resample.OUTPUT_DTYPES.items()}
    )
    assert python == library
    assert gpu.PATH_NAMES[_device.CPU_PATH] == "cpu"


def test_the_default_call_shortcuts_give_what_the_full_conversion_gives(jpeg):
    """decode_and_crop_jpeg's common call (the defaults, bytes in, on the CPU) skips building its
    options, placement and tensor view each time: they must be what the full conversion makes."""
    from custom_op import _args, _device

    defaults = _args.decode_options(ImageReadMode.RGB, False, "raise", _args.DEFAULT_MAX_PIXELS)
    built = _args.DecodeOptions(
        _args.mode_code(ImageReadMode.RGB), False, _args.warning_code("raise"), _args.DEFAULT_MAX_PIXELS
    )
    assert defaults == built and defaults.op_kwargs() == built._asdict()
    assert _args.decode_options("rgb", False, "raise", None) == built._replace(max_pixels=0)
    assert _device.placement("cpu", None, False) == _device.Placement(torch.device("cpu"), None, False, 0)
    assert _device.placement("cpu", None, False, "nvjpeg") == _device.Placement(torch.device("cpu"), None, False, 2)
    with pytest.raises(TypeError, match="check_entropy"):
        _device.placement("cpu", None, "false")
    _args.as_tensor(jpeg)  # the first read-only view spends torch's warning
    view = _args.as_tensor(jpeg)
    assert view.dtype == torch.uint8 and view.shape == (len(jpeg),) and bytes(view.numpy()) == jpeg
    assert _args.as_tensor(b"").shape == (0,)


def test_every_op_with_a_tensor_output_has_a_fake_kernel():
    from custom_op import _ops

    schemas = [s for s in torch._C._jit_get_all_schemas() if s.name.startswith("custom_op::")]
    with_tensors = {s.name for s in schemas if any("Tensor" in str(r.type) for r in s.returns)}
    assert with_tensors <= set(_ops.FAKE_KERNELS), with_tensors - set(_ops.FAKE_KERNELS)
    # The others with a fake kernel take tensors (opcheck runs them on fake ones); none is stale.
    takes_tensors = {s.name for s in schemas if any("Tensor" in str(a.type) for a in s.arguments)}
    assert set(_ops.FAKE_KERNELS) <= with_tensors | takes_tensors, set(_ops.FAKE_KERNELS) - takes_tensors


@pytest.mark.parametrize("files", ["valid", "damaged", "none"])
def test_opcheck_check_entropy_data(jpeg, files):
    """The check of check_entropy=True (test_entropy_decoder.py tests what it finds)."""
    cut = jpeg[: len(jpeg) // 2] + b"\xff\xd9"
    data = {"valid": [jpeg, jpeg], "damaged": [jpeg, cut], "none": []}[files]
    args = ([as_tensor(d) for d in data],)
    expected = {"valid": [0, 0], "damaged": [0, 3], "none": []}[files]
    assert torch.ops.custom_op._check_entropy_data(*args) == expected
    torch.library.opcheck(
        torch.ops.custom_op._check_entropy_data.default,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )
    bad = [torch.zeros(2, 8, dtype=torch.uint8)]
    assert_op_raises(TypeError, "1-D contiguous uint8", torch.ops.custom_op._check_entropy_data, bad)


@pytest.mark.parametrize("window", [(40, 50, 20, 30), (0, 0, 8, 128)])
def test_opcheck_segment_sets(jpeg, window):
    """The testing ops that say which restart segments a window's decode reads on the CPU path, and
    which our CUDA decoder decodes (test_random_access.py tests what they say)."""
    data = as_tensor(custom_op.prepare_jpeg(jpeg, restart_mcus=3))
    last_row, segments = torch.ops.custom_op._jpeg_segments_read(data, *window)
    decoded = torch.ops.custom_op._cuda_decoder_segments(data, *([v] for v in window))
    assert (last_row < 0) == (segments.numel() > 0) and set(segments.tolist()) <= set(decoded.tolist())
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.custom_op._jpeg_segments_read.default, (data, *window), test_utils=checks)
    torch.library.opcheck(
        torch.ops.custom_op._cuda_decoder_segments.default, (data, *([v] for v in window)), test_utils=checks
    )


def test_fake_kernel_shapes(jpeg):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True) as mode:
        data = mode.from_tensor(as_tensor(jpeg))
        out, _ = torch.ops.custom_op.decode_and_crop_jpeg(data, 1, 2, 30, 20, **options())
        assert tuple(out.shape) == (3, 30, 20) and out.dtype == torch.uint8
        gray, _ = torch.ops.custom_op.decode_and_crop_jpeg(data, 1, 2, 30, 20, **options(ImageReadMode.GRAY))
        assert tuple(gray.shape) == (1, 30, 20)
        (stacked,), status, messages = torch.ops.custom_op.decode_jpegs(
            [data, data], [0, 0], [0, 0], [30, 30], [20, 20], whole=False, stack=True, **options()
        )
        assert tuple(stacked.shape) == (2, 3, 30, 20)


def test_gpu_op_fake_kernel_without_a_gpu(jpeg):
    """The GPU operator's schema exists with the CPU library: its fake kernel runs anywhere."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True) as mode:
        data = [mode.from_tensor(as_tensor(jpeg)) for _ in range(3)]
        windows = ([0] * 3, [0] * 3, [10, 20, 30], [5, 6, 7])
        outs, status, messages, paths = torch.ops.custom_op.decode_jpegs_cuda(
            data, *windows, whole=False, stack=False, device=0, **options()
        )
        assert [tuple(o.shape) for o in outs] == [(3, 10, 5), (3, 20, 6), (3, 30, 7)]
        assert all(o.device == torch.device("cuda", 0) for o in outs)
        assert paths == [-1] * 3
        checked, _, _, _ = torch.ops.custom_op.decode_jpegs_cuda(
            data, *windows, whole=False, stack=False, device=0, check_entropy=True, **options()
        )
        assert [tuple(o.shape) for o in checked] == [(3, 10, 5), (3, 20, 6), (3, 30, 7)]
        (whole,), _, _, _ = torch.ops.custom_op.decode_jpegs_cuda(
            data, [], [], [], [], whole=True, stack=True, device=0, **options(ImageReadMode.UNCHANGED)
        )
        assert whole.dim() == 4 and whole.shape[0] == 3
        with pytest.raises(ValueError, match="one size"):
            torch.ops.custom_op.decode_jpegs_cuda(data, *windows, whole=False, stack=True, device=0, **options())


def test_gpu_op_scales_in_the_schema_and_fake_kernel(jpeg):
    """scales: a keyword-only int[] defaulting to [] (all 8); a window is in its scaled image's pixels,
    so the shapes are the windows'; values the GPU decoders do not give raise ValueError, as the kernel
    does (common/checked_options.h)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    (schema,) = [s for s in torch._C._jit_get_all_schemas() if s.name == "custom_op::decode_jpegs_cuda"]
    (scales,) = [a for a in schema.arguments if a.name == "scales"]
    assert scales.kwarg_only and str(scales.type) == "List[int]" and scales.default_value == []
    with FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True) as mode:
        data = [mode.from_tensor(as_tensor(jpeg)) for _ in range(4)]
        windows = ([0] * 4, [0] * 4, [10, 20, 30, 1], [5, 6, 7, 1])
        outs, _, _, paths = torch.ops.custom_op.decode_jpegs_cuda(
            data, *windows, whole=False, stack=False, device=0, scales=[1, 2, 4, 8], **options()
        )
        assert [tuple(o.shape) for o in outs] == [(3, 10, 5), (3, 20, 6), (3, 30, 7), (3, 1, 1)]
        assert paths == [-1] * 4
        for bad in ([3, 8, 8, 8], [0, 8, 8, 8], [16, 8, 8, 8], [8, 8]):
            with pytest.raises(ValueError, match="scale"):
                torch.ops.custom_op.decode_jpegs_cuda(
                    data, *windows, whole=False, stack=False, device=0, scales=bad, **options()
                )
        with pytest.raises(ValueError, match="windows only"):
            torch.ops.custom_op.decode_jpegs_cuda(
                data, [], [], [], [], whole=True, stack=False, device=0, scales=[4] * 4, **options()
            )


def test_torch_compile_keeps_the_op_in_one_graph(jpeg):
    data = as_tensor(jpeg)

    def crop_and_normalize(data, top, left):
        image, _ = torch.ops.custom_op.decode_and_crop_jpeg(data, top, left, 64, 64, **options())
        return image.float().div(255).sub(0.5)

    compiled = torch.compile(crop_and_normalize, fullgraph=True, backend="aot_eager")
    expected = crop_and_normalize(data, 3, 9)
    assert torch.equal(compiled(data, 3, 9), expected)
    # The public wrapper is plain Python around the op, so it traces too.
    compiled_api = torch.compile(
        lambda d: custom_op.decode_and_crop_jpeg(d, 3, 9, 64, 64).float(), fullgraph=True, backend="aot_eager"
    )
    assert torch.equal(compiled_api(data), expected.add(0.5).mul(255).round())


def test_torch_compile_runs_the_batched_call(jpeg):
    """The batched operator returns its messages as str[], so Dynamo runs it outside the graph
    (a graph break): the compiled step gives the eager result, and bad items still raise."""
    data = [as_tensor(jpeg)] * 4

    def step(d):
        return custom_op.decode_and_crop_jpegs(d, 1, 2, 32, 32, stack=True).float().div(255)

    compiled = torch.compile(step, backend="aot_eager")
    assert torch.equal(compiled(data), step(data))
    assert torch.equal(compiled(data), step(data))
    with pytest.raises(RuntimeError, match="batch item 2"):
        compiled(data[:2] + [torch.zeros(10, dtype=torch.uint8)] + data[3:])


def test_profiler_shows_the_op_by_name(jpeg):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        custom_op.decode_and_crop_jpeg(jpeg, 0, 0, 32, 32)
        custom_op.decode_jpeg(jpeg)
    names = {event.name for event in prof.events()}
    assert "custom_op::decode_and_crop_jpeg" in names
    assert "custom_op::decode_jpeg" in names


def test_many_threads_decode_correctly_at_once(jpeg_writer):
    files = [
        jpeg_writer.encode(jpeg_writer.photo_like(120, 160, seed=s), sampling=samp)
        for s, samp in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:1:1"])
    ]
    expected = [custom_op.decode_and_crop_jpeg(f, 10, 20, 90, 100) for f in files]
    errors = []

    def work(k):
        try:
            for i in range(200):
                j = (k + i) % len(files)
                if not torch.equal(custom_op.decode_and_crop_jpeg(files[j], 10, 20, 90, 100), expected[j]):
                    errors.append(f"thread {k} iteration {i}: wrong pixels")
                try:
                    custom_op.decode_jpeg(files[j][: len(files[j]) // 2])
                    errors.append("a truncated file decoded without error")
                except RuntimeError:
                    pass
        except Exception as error:  # noqa: BLE001 - reported below with the thread
            errors.append(f"thread {k}: {error!r}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_decoding_releases_the_gil(jpeg_writer):
    """Another Python thread runs while a decode is in progress.

    The worker signals, then enters the op without giving up the GIL (the switch interval is set to
    a second). If the op kept the GIL, the main thread could not return from its wait until the
    decode had finished; with the GIL released, it wakes while the decode is still running.
    """
    big = jpeg_writer.encode(jpeg_writer.photo_like(3000, 4000, seed=3), sampling="4:4:4", quality=95)
    entering = threading.Event()
    finished_at = []

    def decode():
        entering.set()
        custom_op.decode_jpeg(big)
        finished_at.append(time.perf_counter())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        worker = threading.Thread(target=decode)
        worker.start()
        entering.wait()
        woke_at = time.perf_counter()
        worker.join()
    finally:
        sys.setswitchinterval(old)
    assert woke_at < finished_at[0]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_batched_call_on_the_intra_op_pool_equals_single_calls(jpeg_writer, threads):
    """However many intra-op threads share the batch, each item gets what a single call gives it,
    errors and warnings included, in its own place (bench/bench_cpu_batch.py measures the speed)."""
    good = [
        jpeg_writer.encode(jpeg_writer.photo_like(90 + 7 * i, 130, seed=i), sampling=s)
        for i, s in enumerate(["4:2:0", "4:4:4", "4:2:2", "4:1:1", "4:4:0"] * 4)
    ]
    files = list(good)
    files[3] = good[3][: len(good[3]) // 2]  # truncated: libjpeg warns
    files[7] = b"not a jpeg"
    windows = [(i % 5, i % 7, 60, 80) for i in range(len(files))]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        results = custom_op.decode_and_crop_jpegs(files, *zip(*windows), on_error="return", on_warning="ignore")
        stacked, errors = custom_op.decode_and_crop_jpegs(
            files, *zip(*windows), on_error="return", on_warning="ignore", stack=True
        )
    finally:
        torch.set_num_threads(before)
    for i, (data, window) in enumerate(zip(files, windows)):
        try:
            expected = custom_op.decode_and_crop_jpeg(data, *window, on_warning="ignore")
        except RuntimeError as error:
            assert isinstance(results[i], RuntimeError) and str(error) in str(results[i]).replace("batch item 7: ", "")
            assert isinstance(errors[i], RuntimeError) and not stacked[i].any()
            continue
        assert torch.equal(results[i], expected), i
        assert torch.equal(stacked[i], expected) and errors[i] is None, i


def test_bytes_input_warns_about_nothing(jpeg):
    """Read-only buffers (bytes) are viewed, not copied; torch's one warning about them never reaches
    the user, on the first call or later, whatever their warning filters say."""
    script = (
        "import sys, warnings, custom_op\n"
        "warnings.simplefilter('error')\n"
        "data = sys.stdin.buffer.read()\n"
        "for _ in range(3):\n"
        "    custom_op.decode_and_crop_jpeg(data, 0, 0, 8, 8)\n"
        "    custom_op.decode_and_crop_jpeg(memoryview(data), 0, 0, 8, 8)\n"
        "print('quiet')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], input=jpeg, capture_output=True, timeout=300)
    assert result.returncode == 0 and b"quiet" in result.stdout, result.stderr[-2000:]
