"""The Python binding against lumen.h's contract: a float64 reference, batches, snapshots,
errors, arrays (buffer protocol, DLPack, bf16/fp16) and that native memory is released.

Run by ctest (bindings_python) with PYTHONPATH at the build's bindings/python and
LUMEN_HEADER at capi/include/lumen/lumen.h.
"""
import array
import ctypes
import gc
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import lumen
from lumen import capi
from layer_inputs import H, HV, K, V, random_inputs


def gated_delta_net_reference(q, k, v, g, beta, scale):
    """The recurrence of docs/spec.md §2 in float64: decay, erase with the decayed state, write,
    read. g is a log-decay per value head ([T, HV]) or per key channel ([T, HV, K], KDA)."""
    tokens = q.shape[0]
    state = np.zeros((HV, K, V))
    out = np.zeros((tokens, HV, V))
    for t in range(tokens):
        for hv in range(HV):
            h = hv // (HV // H)
            s = state[hv] * np.reshape(np.exp(g[t, hv]), (-1, 1))
            u = beta[t, hv] * (v[t, hv] - s.T @ k[t, h])
            s = s + np.outer(k[t, h], u)
            state[hv] = s
            out[t, hv] = s.T @ (scale * q[t, h])
    return out, state


def relative_rms(actual, expected):
    return np.linalg.norm(actual - expected) / np.linalg.norm(expected)


def test_every_header_function_is_reachable():
    header = open(os.environ["LUMEN_HEADER"]).read()
    names = set(re.findall(r"LUMEN_API\s+[\w\s\*]+?\b(lumen_\w+)\s*\(", header))
    assert len(names) > 30
    missing = sorted(name for name in names if not callable(getattr(capi, name, None)))
    assert not missing
    constants = set(re.findall(r"\b(LUMEN_[A-Z0-9_]+)\s*=", header))
    assert not sorted(c for c in constants if not hasattr(capi, c))


def test_step_and_prefill_match_the_reference(engine):
    rng = np.random.default_rng(1)
    tokens = 19
    q, k, v, g, beta = random_inputs(rng, tokens)
    expected, expected_state = gated_delta_net_reference(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
        g.astype(np.float64), beta.astype(np.float64), K ** -0.5)

    with engine.session() as stepped:
        out = np.stack([stepped.step(0, q[t], k[t], v[t], g=g[t], beta=beta[t])
                        for t in range(tokens)])
        assert out.shape == (tokens, HV, V)
        assert relative_rms(out, expected) <= 1e-5
        assert relative_rms(stepped.read_state(0), expected_state) <= 1e-5
        assert stepped.tokens(0) == tokens and stepped.tokens(1) == 0

    with engine.session() as prefilled:  # split inside the sequence: 7 + 12 tokens
        first = prefilled.prefill(0, q[:7], k[:7], v[:7], g=g[:7], beta=beta[:7])
        rest = np.empty((tokens - 7, HV, V), np.float32)
        assert prefilled.prefill(0, q[7:], k[7:], v[7:], g=g[7:], beta=beta[7:],
                                 out=rest) is rest
        assert relative_rms(np.concatenate([first, rest]), expected) <= 1e-4


def test_batched_step_and_varlen_prefill_match_single_sessions(engine):
    rng = np.random.default_rng(2)
    n = 3
    q, k, v, g, beta = random_inputs(rng, n)
    sessions = [engine.session() for _ in range(n)]
    singles = [engine.session() for _ in range(n)]
    batched = engine.step_batch(0, sessions, q, k, v, g=g, beta=beta)
    assert batched.shape == (n, HV, V)
    for i in range(n):
        single = singles[i].step(0, q[i], k[i], v[i], g=g[i], beta=beta[i])
        np.testing.assert_array_equal(batched[i], single)

    lengths = [4, 0, 5]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    q, k, v, g, beta = random_inputs(rng, offsets[-1])
    out = engine.prefill_varlen(0, sessions, offsets, q, k, v, g=g, beta=beta)
    for i, session in enumerate(singles):
        a, b = offsets[i], offsets[i + 1]
        if a == b:
            continue
        single = session.prefill(0, q[a:b], k[a:b], v[a:b], g=g[a:b], beta=beta[a:b])
        np.testing.assert_allclose(out[a:b], single, rtol=0, atol=1e-6)
    assert [s.tokens(0) for s in sessions] == [5, 1, 6]
    with pytest.raises(ValueError, match="cu_seqlens"):
        capi.lumen_engine_prefill_varlen(engine.address, 0, ([s.address for s in sessions],
                                                             [0, 1]), None, None)
    for session in sessions + singles:
        session.close()


def test_snapshot_round_trips_through_bytes_and_a_file(engine, tmp_path):
    rng = np.random.default_rng(3)
    q, k, v, g, beta = random_inputs(rng, 6)
    with engine.session() as session, engine.session() as from_bytes, \
            engine.session() as from_file:
        session.prefill(0, q, k, v, g=g, beta=beta)
        session.prefill(1, q, k, np.ascontiguousarray(v[:, :H]))  # HV = H in layer 1
        data = session.snapshot()
        assert isinstance(data, bytes) and len(data) == session.snapshot_size()
        from_bytes.restore(data)
        from_bytes.restore(bytearray(data))  # any buffer
        session.save(tmp_path / "session.lumen")
        from_file.load(str(tmp_path / "session.lumen"))
        for restored in (from_bytes, from_file):
            assert restored.tokens(0) == 6 and restored.tokens(1) == 6
            for layer in (0, 1):
                np.testing.assert_array_equal(restored.read_state(layer),
                                              session.read_state(layer))
        x = random_inputs(rng, 1)
        expected = session.step(0, x[0][0], x[1][0], x[2][0], g=x[3][0], beta=x[4][0])
        for restored in (from_bytes, from_file):
            np.testing.assert_array_equal(
                restored.step(0, x[0][0], x[1][0], x[2][0], g=x[3][0], beta=x[4][0]), expected)
        buffer = bytearray(session.snapshot_size())
        assert session.snapshot_into(buffer) == len(buffer)
        half = session.snapshot(state_dtype="bfloat16")
        assert len(half) < len(data)


def test_bad_calls_raise_with_the_library_message(engine):
    with engine.session() as session:
        q = np.ones((H, K), np.float32)
        before = session.read_state(0)
        with pytest.raises(lumen.LumenError) as error:
            session.step(0, q, q, np.ones((HV, V), np.float32))  # g and beta missing
        assert error.value.status == lumen.Status.INVALID_ARGUMENT
        assert error.value.status_name == "LUMEN_ERROR_INVALID_ARGUMENT"
        assert "g" in error.value.message and error.value.message in str(error.value)
        np.testing.assert_array_equal(session.read_state(0), before)
        assert session.tokens(0) == 0
        with pytest.raises(lumen.LumenError) as error:
            session.tokens(7)
        assert error.value.status == lumen.Status.OUT_OF_RANGE
        assert "7" in error.value.message
        with pytest.raises(lumen.LumenError) as error:
            session.restore(b"not a snapshot")
        assert error.value.status == lumen.Status.CORRUPT_SNAPSHOT
        with pytest.raises(lumen.LumenError) as error:
            session.load("/nonexistent/dir/file.lumen")
        assert error.value.status == lumen.Status.IO
    with pytest.raises(lumen.LumenError) as error:
        with lumen.ModelBuilder() as builder:
            builder.add_layer(family="gla", num_heads=0, key_dim=4, value_dim=4)
    assert error.value.status == lumen.Status.INVALID_ARGUMENT and error.value.message
    with pytest.raises(TypeError):
        lumen.LayerOptions(no_such_field=1)
    with pytest.raises(ValueError, match="closed"):
        session.tokens(0)


def test_reserving_scratch_checks_its_arguments(engine):
    # The CPU backend holds no device scratch: a valid reservation changes nothing.
    engine.reserve(max_sessions=8, max_tokens=4096)
    engine.reserve(lumen.Reservation(max_sessions=2))
    assert engine.scratch_bytes == 0
    for sessions, tokens in [(0, 1), (1, 0), (-3, 5), ((1 << 20) + 1, 1)]:
        with pytest.raises(lumen.LumenError) as error:
            engine.reserve(max_sessions=sessions, max_tokens=tokens)
        assert error.value.status == lumen.Status.INVALID_ARGUMENT
        assert "max_sessions" in error.value.message
    with pytest.raises(TypeError):
        engine.reserve(lumen.Reservation(), max_tokens=2)


def test_any_buffer_and_dlpack_without_copies(engine):
    rng = np.random.default_rng(4)
    q, k, v, g, beta = (x[0] for x in random_inputs(rng, 1))

    class DLPackOnly:
        """A tensor that offers nothing but DLPack (as PyTorch, JAX and CuPy do)."""

        def __init__(self, array):
            self._array = array

        def __dlpack__(self, stream=None):
            return self._array.__dlpack__()

        def __dlpack_device__(self):
            return self._array.__dlpack_device__()

    with engine.session() as a, engine.session() as b, engine.session() as c:
        expected = a.step(0, q, k, v, g=g, beta=beta)
        as_arrays = [array.array("f", x.tobytes()) for x in (q, k, v, g, beta)]
        out = array.array("f", bytes(4 * HV * V))
        b.step(0, *as_arrays[:3], g=as_arrays[3], beta=as_arrays[4], out=out)
        np.testing.assert_array_equal(np.frombuffer(out, np.float32).reshape(HV, V), expected)
        dl_out = np.zeros((HV, V), np.float32)
        c.step(0, *(DLPackOnly(x) for x in (q, k, v)), g=DLPackOnly(g), beta=DLPackOnly(beta),
               out=DLPackOnly(dl_out))
        np.testing.assert_array_equal(dl_out, expected)
        with pytest.raises(ValueError, match="contiguous"):
            a.step(0, np.ones((K, H), np.float32).T, q, v, g=g, beta=beta)
        with pytest.raises(TypeError, match="format"):
            a.step(0, q.astype(np.float64), k, v, g=g, beta=beta)


def to_bf16_bits(x):
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_bf16_and_fp16_inputs(engine):
    rng = np.random.default_rng(5)
    inputs = random_inputs(rng, 5)
    for dtype in ("bfloat16", "float16"):
        if dtype == "bfloat16":
            low = [to_bf16_bits(x) for x in inputs]  # uint16 bits
            widened = [(b.astype(np.uint32) << 16).view(np.float32) for b in low]
        else:
            low = [x.astype(np.float16) for x in inputs]  # format 'e': no dtype needed
            widened = [x.astype(np.float32) for x in low]
        with engine.session() as narrow, engine.session() as wide:
            got = narrow.prefill(0, low[0], low[1], low[2], g=low[3], beta=low[4], dtype=dtype)
            expected = wide.prefill(0, *widened[:3], g=widened[3], beta=widened[4])
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
        if dtype == "bfloat16":
            with engine.session() as session, pytest.raises(TypeError, match="dtype"):
                session.prefill(0, low[0], low[1], low[2], g=low[3], beta=low[4])


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_native_memory_is_released():
    # 256 KiB of state per session: 2,000 leaked sessions would hold 500 MiB.
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="retention", num_heads=4, key_dim=128, value_dim=128)
        model = builder.build()

    def cycle(count):
        for i in range(count):
            with lumen.Engine(model, num_threads=1) as engine:
                with engine.session() as session:
                    fork = session.fork()
                    data = session.snapshot()
                    fork.restore(data)
                    if i % 2:
                        fork.close()  # else: freed by the finalizer when dropped
        gc.collect()

    cycle(200)
    before = resident_bytes()
    cycle(2000)
    grown = resident_bytes() - before
    assert grown < 32 << 20, "resident memory grew by %d bytes" % grown
    model.close()


def test_text_fields_free_their_copies():
    # Each write of spill_directory copies 1 MiB: SWIG's default setter for a const char*
    # member never freed those copies, so 256 writes and 256 structs would keep 512 MiB.
    text = "d" * (1 << 20)
    options = lumen.EngineOptions(spill_directory=text)
    assert options.spill_directory == text
    options.spill_directory = None
    assert options.spill_directory is None

    def cycle(count):
        for _ in range(count):
            options.spill_directory = text
            lumen.EngineOptions(spill_directory=text)  # its destructor frees its copy
        gc.collect()

    cycle(16)
    before = resident_bytes()
    cycle(256)
    grown = resident_bytes() - before
    assert grown < 64 << 20, "resident memory grew by %d bytes" % grown
    assert options.spill_directory == text


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLManagedTensor(ctypes.Structure):
    """dlpack.h's DLManagedTensor (a DLTensor, then manager_ctx and deleter)."""
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _FakeDeviceTensor:
    """A DLPack producer that says its (host) data lives on CUDA device 0: what a GPU tensor
    looks like to the binding. Records the stream it is asked to sync with."""

    def __init__(self, array):
        self.array = array
        self.streams = []

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        self._shape = (ctypes.c_int64 * self.array.ndim)(*self.array.shape)
        self._tensor = _DLManagedTensor(self.array.ctypes.data, _DLDevice(2, 0), self.array.ndim,
                                        _DLDataType(2, 32, 1), self._shape, None, 0, None, None)
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype = ctypes.py_object
        new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new_capsule(ctypes.addressof(self._tensor), b"dltensor", None)


def test_device_arrays_pass_through_with_their_stream(engine):
    q = np.ones((H, K), np.float32)
    v = np.ones((HV, V), np.float32)
    g, beta = np.full(HV, -0.1, np.float32), np.full(HV, 0.5, np.float32)
    tensors = [_FakeDeviceTensor(x) for x in (q, q, v, g, beta)]
    out = _FakeDeviceTensor(np.zeros((HV, V), np.float32))
    with engine.session() as session:
        with pytest.raises(ValueError, match="out"):
            session.step(0, *tensors[:3], g=tensors[3], beta=tensors[4], stream=7)
        # The CPU engine refuses device memory with the library's message: the binding told it
        # LUMEN_MEMORY_DEVICE.
        with pytest.raises(lumen.LumenError) as error:
            session.step(0, *tensors[:3], g=tensors[3], beta=tensors[4], out=out, stream=7)
        assert error.value.status == lumen.Status.UNSUPPORTED
        assert all(t.streams[-1] == 7 for t in tensors + [out])
        assert session.tokens(0) == 0
        with pytest.raises(ValueError, match="one memory"):
            session.step(0, tensors[0], q, v, g=g, beta=beta, out=out)


def test_handles_forward_header_calls_they_do_not_wrap(engine, monkeypatch):
    seen = []
    monkeypatch.setattr(capi, "lumen_session_future_call", lambda *args: seen.append(args) or 5,
                        raising=False)
    with engine.session() as session:
        assert session.future_call(1, 2) == 5
        assert seen == [(session.address, 1, 2)]
        with pytest.raises(AttributeError):
            session.no_such_call()
    options = lumen.LayerOptions(family="kda", num_heads=1, key_dim=4, value_dim=4,
                                 beta_sigmoid=True)
    assert (options.family, options.beta_sigmoid) == (lumen.Family.KDA, 1)
    with pytest.raises(ValueError, match="preset"):
        lumen.LayerOptions(preset="no_such_model")


def test_allow_neg_eigval_takes_beta_in_0_2_as_fla_does():
    """fla's allow_neg_eigval: beta in [0, 2], given as it is or as 2 * sigmoid(logit) with
    beta_sigmoid; a beta outside [0, 2] fails naming the range."""
    rng = np.random.default_rng(7)
    tokens = 6
    q, k, v, g, _ = random_inputs(rng, tokens)
    beta = rng.uniform(0.0, 2.0, (tokens, HV)).astype(np.float32)
    logits = (2.0 * rng.standard_normal((tokens, HV))).astype(np.float32)
    as_double = [x.astype(np.float64) for x in (q, k, v, g)]
    given, _ = gated_delta_net_reference(*as_double, beta.astype(np.float64), K ** -0.5)
    doubled = 2.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    from_logits, _ = gated_delta_net_reference(*as_double, doubled, K ** -0.5)
    with lumen.ModelBuilder() as builder:
        dims = dict(family="gated_delta_net", num_heads=H, num_value_heads=HV, key_dim=K,
                    value_dim=V, allow_neg_eigval=True)
        builder.add_layer(**dims)
        builder.add_layer(beta_sigmoid=True, **dims)
        model = builder.build()
    with model, lumen.Engine(model, num_threads=1) as engine, lumen.Session(engine) as session:
        assert model.layer_options(1).allow_neg_eigval == 1
        assert relative_rms(session.prefill(0, q, k, v, g=g, beta=beta), given) <= 1e-4
        assert relative_rms(session.prefill(1, q, k, v, g=g, beta=logits), from_logits) <= 1e-4
        with pytest.raises(lumen.LumenError, match=r"must lie in \[0, 2\]"):
            session.step(0, q[0], k[0], v[0], g=g[0], beta=np.full(HV, 2.5, np.float32))


def naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound):
    """fla's fla/ops/kda/gate.py naive_kda_lowerbound_gate, in numpy float64: A_log may be None."""
    g = g + dt_bias.reshape(HV, K)
    if A_log is not None:
        g = np.exp(A_log).reshape(HV, 1) * g
    return lower_bound / (1.0 + np.exp(-g))


def test_gate_lower_bound_is_flas_lower_bounded_gate():
    """fla's lower_bound on KDA: g = lower_bound * sigmoid(exp(A_log) * (g_raw + dt_bias)); its
    form without A_log is A_log = 0 here."""
    rng = np.random.default_rng(9)
    tokens = 7
    q, k, v, _, beta = random_inputs(rng, tokens)
    g_raw = rng.standard_normal((tokens, HV, K)).astype(np.float32)
    a_log = rng.uniform(0.0, np.log(16.0), HV).astype(np.float32)
    dt_bias = rng.uniform(-1.0, 1.0, HV * K).astype(np.float32)
    with lumen.ModelBuilder() as builder:
        for layer, layer_a_log in enumerate((a_log, np.zeros(HV, np.float32))):
            builder.add_layer(family="kda", num_heads=H, num_value_heads=HV, key_dim=K,
                              value_dim=V, gate_raw=True, gate_lower_bound=-5.0)
            builder.set_param(layer, "a_log", layer_a_log)
            builder.set_param(layer, "dt_bias", dt_bias)
        model = builder.build()
    as_double = [x.astype(np.float64) for x in (q, k, v)]
    with model, lumen.Engine(model, num_threads=1) as engine, lumen.Session(engine) as session:
        assert model.layer_options(0).gate_lower_bound == -5.0
        for layer, fla_a_log in ((0, a_log.astype(np.float64)), (1, None)):
            gates = naive_kda_lowerbound_gate(g_raw.astype(np.float64), fla_a_log,
                                              dt_bias.astype(np.float64), -5.0)
            expected, _ = gated_delta_net_reference(*as_double, gates, beta.astype(np.float64),
                                                     K ** -0.5)
            out = session.prefill(layer, q, k, v, g=g_raw, beta=beta)
            assert relative_rms(out, expected) <= 1e-4


def test_normalizer_eps_default_and_flas():
    """Linear attention's normaliser divides by q.z + eps: lumen's eps is 1e-6 by default,
    fla's linear attention adds 1e-10. With q = k = 1e-3, v = 1, K = V = 1: 0.5 and 0.9999."""
    one = dict(family="linear_attn", num_heads=1, key_dim=1, value_dim=1, normalize=True)
    with lumen.ModelBuilder() as builder:
        builder.add_layer(**one)
        builder.add_layer(normalize_eps=1e-10, **one)
        model = builder.build()
    q = np.full((1, 1), 1e-3, np.float32)
    with model, lumen.Engine(model, num_threads=1) as engine, lumen.Session(engine) as session:
        assert model.layer_options(0).normalize_eps == np.float32(1e-6)
        lumens = session.step(0, q, q, np.ones((1, 1), np.float32))
        flas = session.step(1, q, q, np.ones((1, 1), np.float32))
    assert abs(float(lumens[0, 0]) - 0.5) < 1e-4
    assert abs(float(flas[0, 0]) - 0.9999) < 1e-4


class FlaGatedDeltaNetLayer:
    """fla's GatedDeltaNet layer core in float64, written as fla keeps its cache: conv windows
    [C, W] (ShortConvolution.step: roll left, write the newest column, weigh all W), SiLU,
    l2norm of q and k (x / sqrt(sum x^2 + 1e-6)), beta = sigmoid(b), the raw gate
    -exp(A_log) softplus(g + dt_bias), and the recurrent state V-first, [HV, V, K]
    (state_v_first=True): S = exp(g) S; S += beta (v - S k) k^T; o = S (scale q)."""

    def __init__(self, weights, a_log, dt_bias, width):
        self.weights, self.a_log, self.dt_bias = weights, a_log, dt_bias
        self.conv = [np.zeros((w.shape[0], width)) for w in weights]
        self.state = np.zeros((HV, V, K))

    def step(self, q, k, v, g, b):
        parts = []
        for window, weight, x in zip(self.conv, self.weights, (q, k, v)):
            window[:] = np.roll(window, -1, axis=-1)
            window[:, -1] = x.reshape(-1)
            y = (window * weight).sum(-1)
            parts.append(y / (1.0 + np.exp(-y)))
        q, k = (p.reshape(H, K) / np.sqrt((p.reshape(H, K) ** 2).sum(-1, keepdims=True) + 1e-6)
                for p in parts[:2])
        v = parts[2].reshape(HV, V)
        decay = np.exp(-np.exp(self.a_log) * np.logaddexp(0.0, g + self.dt_bias))
        beta = 1.0 / (1.0 + np.exp(-b))
        out = np.zeros((HV, V))
        for hv in range(HV):
            h = hv // (HV // H)
            s = self.state[hv] * decay[hv]
            s = s + np.outer(beta[hv] * (v[hv] - s @ k[h]), k[h])
            self.state[hv] = s
            out[hv] = s @ (K ** -0.5 * q[h])
        return out


def test_a_conversation_moves_from_flas_cache_layout_into_lumen():
    """fla's layer cache ([HV, V, K] state, [C, W] conv windows) written with
    layout=StateLayout.FLA continues the conversation in lumen as fla's own recurrence does;
    lumen's state read back in fla's layout is fla's cache."""
    rng = np.random.default_rng(13)
    width, tokens, moved_at = 4, 9, 5
    channels = (H * K, H * K, HV * V)
    weights = [rng.uniform(-0.5, 0.5, (c, width)) for c in channels]
    a_log = rng.uniform(0.0, np.log(16.0), HV)
    dt_bias = rng.uniform(-1.0, 1.0, HV)
    q = rng.standard_normal((tokens, H, K)).astype(np.float32)
    k = rng.standard_normal((tokens, H, K)).astype(np.float32)
    v = rng.standard_normal((tokens, HV, V)).astype(np.float32)
    g = rng.standard_normal((tokens, HV)).astype(np.float32)
    b = rng.standard_normal((tokens, HV)).astype(np.float32)
    fla = FlaGatedDeltaNetLayer([w.astype(np.float32).astype(np.float64) for w in weights],
                                a_log.astype(np.float32).astype(np.float64),
                                dt_bias.astype(np.float32).astype(np.float64), width)
    expected = [fla.step(*(x[t].astype(np.float64) for x in (q, k, v, g, b)))
                for t in range(tokens)]
    # The same conversation up to the move, for fla's cache at that point.
    moved = FlaGatedDeltaNetLayer(fla.weights, fla.a_log, fla.dt_bias, width)
    for t in range(moved_at):
        moved.step(*(x[t].astype(np.float64) for x in (q, k, v, g, b)))

    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV, key_dim=K,
                          value_dim=V, qk_l2norm=True, beta_sigmoid=True, gate_raw=True,
                          conv_size=width)
        builder.set_param(0, "a_log", a_log.astype(np.float32))
        builder.set_param(0, "dt_bias", dt_bias.astype(np.float32))
        for part, weight in zip("qkv", weights):
            builder.set_param(0, "conv_%s_weight" % part, weight.astype(np.float32))
        model = builder.build()
    parts = (lumen.StatePart.CONV_Q, lumen.StatePart.CONV_K, lumen.StatePart.CONV_V)
    with model, lumen.Engine(model, num_threads=1) as engine, lumen.Session(engine) as session:
        fla_layout = lumen.StateLayout.FLA
        session.write_state(0, moved.state.astype(np.float32), layout=fla_layout)
        for part, window in zip(parts, moved.conv):
            session.write_state(0, window.astype(np.float32), part, layout=fla_layout)
        rest = slice(moved_at, tokens)
        out = session.prefill(0, q[rest], k[rest], v[rest], g=g[rest], beta=b[rest])
        assert relative_rms(out, np.stack(expected[moved_at:])) <= 1e-4
        state = session.read_state(0, layout=fla_layout)
        assert state.shape == (HV, V, K)
        assert relative_rms(state, fla.state) <= 1e-4
        for part, window in zip(parts, fla.conv):
            read = session.read_state(0, part, layout=fla_layout)
            assert read.shape == window.shape
            assert not read[:, 0].any()  # the column fla drops next
            np.testing.assert_allclose(read[:, 1:], window[:, 1:], rtol=1e-6)


def test_presets_and_conv_windows():
    """A preset layer at small dims with its short convolution: the windows are state parts
    [C, W-1] holding the last W-1 raw inputs, oldest first."""
    options = lumen.LayerOptions(preset="qwen3_next_gated_delta_net", num_heads=1,
                                 num_value_heads=2, key_dim=4, value_dim=3)
    assert options.conv_size == 4
    assert options.conv_activation == lumen.ConvActivation.SILU
    assert lumen.LayerOptions(preset="mamba2").num_value_heads == 80
    assert lumen.LayerOptions(preset="kimi_linear_kda", conv_activation="none").conv_activation \
        == lumen.ConvActivation.NONE
    rng = np.random.default_rng(5)
    with lumen.ModelBuilder() as builder:
        builder.add_layer(options)
        builder.set_param(0, "a_log", np.zeros(2, np.float32))
        builder.set_param(0, lumen.Param.DT_BIAS, np.zeros(2, np.float32))
        for part, channels in (("q", 4), ("k", 4), ("v", 6)):
            weight = rng.uniform(-0.5, 0.5, (channels, 4)).astype(np.float32)
            builder.set_param(0, "conv_%s_weight" % part, weight)
        model = builder.build()
    tokens = 5
    q = rng.standard_normal((tokens, 1, 4)).astype(np.float32)
    k = rng.standard_normal((tokens, 1, 4)).astype(np.float32)
    v = rng.standard_normal((tokens, 2, 3)).astype(np.float32)
    g = rng.standard_normal((tokens, 2)).astype(np.float32)
    beta = rng.standard_normal((tokens, 2)).astype(np.float32)
    with model, lumen.Engine(model, num_threads=1) as engine, lumen.Session(engine) as session:
        session.prefill(0, q, k, v, g, beta)
        for part, raw in ((lumen.StatePart.CONV_Q, q), (lumen.StatePart.CONV_V, v)):
            window = np.asarray(session.read_state(0, part))
            channels = raw[0].size
            assert window.shape == (channels, 3)
            np.testing.assert_array_equal(window, raw[-3:].reshape(3, channels).T)
        session.write_state(0, np.zeros((4, 3), np.float32), lumen.StatePart.CONV_K)
        assert not np.asarray(session.read_state(0, lumen.StatePart.CONV_K)).any()


def test_the_example_runs_without_numpy(tmp_path):
    example = pathlib.Path(__file__).resolve().parents[3] / "examples/python/stream_snapshot.py"
    code = ("import runpy, sys; sys.modules['numpy'] = None; "
            "sys.argv = [sys.argv[0], %r]; runpy.run_path(%r, run_name='__main__')"
            % (str(tmp_path / "example.lumen"), str(example)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "match bit for bit" in result.stdout
