"""What arrays go in and what comes out: an output lumen allocates is of the kind of q (a
PyTorch tensor for tensors, any array-API library's array for its arrays, numpy for buffers),
and raw bytes are refused with a way to read them."""
import array
import types
import warnings

import numpy as np
import pytest
import torch

import lumen
from layer_inputs import HV, V, random_inputs

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "The numpy.array_api submodule is still experimental"
    import numpy.array_api as array_api
ARRAY_API_ARRAY = type(array_api.zeros(1))


class HostTensor:
    """The least a library's array needs for lumen to return its kind: DLPack export, a
    `device`, and an array namespace (the array API standard) with empty() and the dtypes."""

    def __init__(self, data):
        self.data = data

    def __dlpack__(self, stream=None):
        return self.data.__dlpack__()

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    @property
    def device(self):
        return "cpu"

    def __array_namespace__(self, api_version=None):
        return HOST_TENSORS


HOST_TENSORS = types.SimpleNamespace(
    float32=np.float32, float16=np.float16,
    empty=lambda shape, dtype=None, device=None: HostTensor(np.empty(shape, dtype)))


class DLPackOnly:
    """DLPack and nothing else: no namespace to allocate with, so outputs are numpy."""

    def __init__(self, data):
        self.data = data

    def __dlpack__(self, stream=None):
        return self.data.__dlpack__()

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()


def every_call(engine, convert, rng):
    """Runs step, prefill, step_batch and prefill_varlen on inputs converted by `convert`;
    returns their outputs and the same calls' outputs on numpy inputs."""
    results = []
    for inputs_of in (convert, lambda x: x):
        q, k, v, g, beta = random_inputs(np.random.default_rng(rng), 5)
        x = [inputs_of(a) for a in (q, k, v, g, beta)]
        first = [inputs_of(a[0]) for a in (q, k, v, g, beta)]
        sessions = [engine.session() for _ in range(3)]
        results.append([
            sessions[0].step(0, *first),
            sessions[1].prefill(0, *x),
            engine.step_batch(0, sessions, *[inputs_of(a[:3]) for a in (q, k, v, g, beta)]),
            engine.prefill_varlen(0, sessions, [0, 1, 1, 5], *x),
        ])
        for session in sessions:
            session.close()
    return results


def test_torch_tensors_in_give_torch_tensors_out(engine):
    got, expected = every_call(engine, torch.from_numpy, 20)
    for out, reference in zip(got, expected):
        assert isinstance(out, torch.Tensor)
        assert out.dtype == torch.float32 and out.device.type == "cpu"
        assert tuple(out.shape) == reference.shape
        np.testing.assert_array_equal(out.numpy(), reference)


def test_torch_bf16_and_fp16_inputs_and_outputs(engine):
    q, k, v, g, beta = random_inputs(np.random.default_rng(21), 4)
    for dtype in (torch.bfloat16, torch.float16):
        low = [torch.from_numpy(x).to(dtype) for x in (q, k, v, g, beta)]
        with engine.session() as a, engine.session() as b, engine.session() as c:
            wide = a.prefill(0, *[x.float() for x in low])
            narrow_in = b.prefill(0, *low)
            assert narrow_in.dtype == torch.float32  # the output's default
            np.testing.assert_allclose(narrow_in.numpy(), wide.numpy(), rtol=1e-6, atol=1e-7)
            narrow_out = c.prefill(0, *low, out_dtype=str(dtype).split(".")[1])
            assert narrow_out.dtype == dtype and tuple(narrow_out.shape) == (4, HV, V)
            np.testing.assert_allclose(narrow_out.float().numpy(), wide.numpy(), rtol=1e-2,
                                       atol=1e-2)


def test_array_api_arrays_in_give_their_kind_out(engine):
    got, expected = every_call(engine, array_api.asarray, 22)
    for out, reference in zip(got, expected):
        assert type(out) is ARRAY_API_ARRAY
        np.testing.assert_array_equal(np.from_dlpack(out), reference)


def test_any_type_with_an_array_namespace_gets_its_own_kind_back(engine):
    got, expected = every_call(engine, HostTensor, 23)
    for out, reference in zip(got, expected):
        assert type(out) is HostTensor and out.data.shape == reference.shape
        np.testing.assert_array_equal(out.data, reference)


def test_buffers_and_bare_dlpack_give_numpy_out(engine):
    for convert in (DLPackOnly, lambda x: array.array("f", x.tobytes())):
        got, expected = every_call(engine, convert, 24)
        for out, reference in zip(got, expected):
            assert type(out) is np.ndarray
            np.testing.assert_array_equal(out, reference)


def test_read_only_buffers_are_inputs_and_raw_bytes_are_refused(engine):
    q, k, v, g, beta = (x[0] for x in random_inputs(np.random.default_rng(25), 1))
    with engine.session() as a, engine.session() as b, engine.session() as c:
        expected = a.step(0, q, k, v, g=g, beta=beta)
        frozen = [np.frombuffer(x.tobytes(), np.float32) for x in (q, k, v, g, beta)]
        assert not frozen[0].flags.writeable
        np.testing.assert_array_equal(b.step(0, *frozen), expected)
        from_bytes = [memoryview(x.tobytes()).cast("f") for x in (q, k, v, g, beta)]
        np.testing.assert_array_equal(c.step(0, *from_bytes), expected)
        with pytest.raises(TypeError, match=r"q holds bytes.*memoryview\(q\)\.cast\('f'\)"):
            a.step(0, q.tobytes(), k, v, g=g, beta=beta)
        with pytest.raises(TypeError, match="out must be writable"):
            a.step(0, q, k, v, g=g, beta=beta, out=np.zeros((HV, V), np.float32).tobytes())


def test_parameters_and_states_take_host_tensors(engine):
    rng = np.random.default_rng(26)
    with engine.session() as session:
        session.prefill(0, *random_inputs(rng, 3))
        state = session.read_state(0)
        as_tensor = torch.zeros(state.shape)
        assert session.read_state(0, out=as_tensor) is as_tensor
        np.testing.assert_array_equal(as_tensor.numpy(), state)
        session.write_state(0, torch.zeros(state.shape))
        assert not session.read_state(0).any()
        session.write_state(0, HostTensor(state))
        np.testing.assert_array_equal(session.read_state(0), state)
        with pytest.raises(TypeError, match="values must be float32 in host memory"):
            session.write_state(0, torch.zeros(state.shape, dtype=torch.float16))
        with pytest.raises(TypeError, match="values has DLPack dtype"):
            session.write_state(0, torch.zeros(state.shape, dtype=torch.float64))
        session.write_state(0, state.ravel().tolist())  # numbers are values, never an out
        with pytest.raises(TypeError, match="out must be a writable buffer"):
            session.read_state(0, out=[0.0] * state.size)
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=1, key_dim=4, value_dim=4,
                          gate_raw=True)
        builder.set_param(0, "a_log", torch.zeros(1))
        builder.set_param(0, "dt_bias", [0.5])
        builder.build().close()
