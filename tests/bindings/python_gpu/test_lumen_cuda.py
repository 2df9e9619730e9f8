"""The Python binding on a CUDA engine with PyTorch's CUDA tensors (DLPack, device memory,
the caller's stream, CUDA graphs, outputs allocated as CUDA tensors, shape checks), checked
against the same calls on a CPU engine.

Run by ctest (bindings_python_cuda, label `gpu`) on a machine with an NVIDIA GPU and a Python
that has PyTorch with CUDA, with PYTHONPATH at the build's bindings/python.
"""
import numpy as np
import pytest
import torch

import lumen

H, HV, K, V = 4, 8, 64, 64  # grouped value heads: HV = 2 H
CHUNKWISE_BOUND = 1e-4  # docs/spec.md §4: the relative RMS bound of a chunkwise prefill
STEP_BOUND = 1e-5  # one token: both backends are a few fp32 roundings from float64

def relative_rms(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    return np.linalg.norm(actual - expected) / np.linalg.norm(expected)


@pytest.fixture(scope="module")
def model():
    assert torch.cuda.is_available(), "this test needs PyTorch with a CUDA device"
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV,
                          key_dim=K, value_dim=V, qk_l2norm=1, beta_sigmoid=1, gate_raw=1)
        rng = np.random.default_rng(0)
        builder.set_param(0, "a_log", np.log(rng.uniform(1, 16, HV)).astype(np.float32))
        builder.set_param(0, "dt_bias", rng.uniform(-1, 1, HV).astype(np.float32))
        return builder.build()


@pytest.fixture(scope="module")
def engines(model):
    cuda = lumen.Engine(model, backend="cuda")
    assert cuda.backend == lumen.Backend.CUDA
    cpu = lumen.Engine(model, backend="cpu")
    return cuda, cpu


def random_inputs(rng, tokens):
    """q, k, v, g (raw gate), beta (logits), as fp32 numpy arrays with a leading tokens."""
    return (rng.standard_normal((tokens, H, K)).astype(np.float32),
            rng.standard_normal((tokens, H, K)).astype(np.float32),
            rng.standard_normal((tokens, HV, V)).astype(np.float32),
            rng.standard_normal((tokens, HV)).astype(np.float32),
            rng.standard_normal((tokens, HV)).astype(np.float32))


def on_device(arrays, dtype=torch.float32):
    return [torch.from_numpy(a).to(device="cuda", dtype=dtype) for a in arrays]


def test_prefill_on_device_tensors_and_a_side_stream_matches_the_cpu(engines):
    cuda, cpu = engines
    rng = np.random.default_rng(1)
    inputs = random_inputs(rng, 300)  # several chunks and a partial one
    cpu_session = cpu.session()
    expected = cpu_session.prefill(0, *inputs)

    session = cuda.session()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        device_inputs = on_device(inputs)
        out = torch.full((300, HV, V), float("nan"), device="cuda")
        session.prefill(0, *device_inputs, out=out, stream=stream.cuda_stream)
    stream.synchronize()
    assert relative_rms(out.cpu().numpy(), expected) <= CHUNKWISE_BOUND
    assert relative_rms(session.read_state(0), cpu_session.read_state(0)) <= CHUNKWISE_BOUND
    assert session.tokens(0) == 300


def test_step_batch_with_bf16_device_inputs_matches_the_cpu(engines):
    cuda, cpu = engines
    rng = np.random.default_rng(2)
    n = 5
    cuda_sessions = [cuda.session() for _ in range(n)]
    cpu_sessions = [cpu.session() for _ in range(n)]
    for step in range(3):
        inputs = random_inputs(rng, n)
        # Both backends get the same bf16 values; outputs stay fp32 for a tight comparison.
        bf16 = on_device(inputs, torch.bfloat16)
        host_bits = [t.cpu().view(torch.int16).numpy().view(np.uint16) for t in bf16]
        expected = cpu.step_batch(0, cpu_sessions, *host_bits, dtype="bfloat16")
        out = torch.empty((n, HV, V), device="cuda")
        cuda.step_batch(0, cuda_sessions, *bf16, out=out)  # the default stream
        torch.cuda.synchronize()
        assert relative_rms(out.cpu().numpy(), expected) <= STEP_BOUND, step
    for cuda_session, cpu_session in zip(cuda_sessions, cpu_sessions):
        assert relative_rms(cuda_session.read_state(0), cpu_session.read_state(0)) <= STEP_BOUND


def test_device_tensors_in_give_device_tensors_out(engines):
    cuda, cpu = engines
    rng = np.random.default_rng(6)
    inputs = random_inputs(rng, 40)
    expected = cpu.session().prefill(0, *inputs)
    session = cuda.session()
    device_inputs = on_device(inputs)
    out = session.prefill(0, *device_inputs)  # no out=: lumen allocates it with torch.empty
    assert isinstance(out, torch.Tensor) and out.device == device_inputs[0].device
    assert out.dtype == torch.float32 and tuple(out.shape) == (40, HV, V)
    torch.cuda.synchronize()
    assert relative_rms(out.cpu().numpy(), expected) <= CHUNKWISE_BOUND

    token = on_device([x[0] for x in random_inputs(rng, 1)], torch.bfloat16)
    step = session.step(0, *token, out_dtype="bfloat16")
    assert step.is_cuda and step.dtype == torch.bfloat16 and tuple(step.shape) == (HV, V)
    with pytest.raises(ValueError, match=r"q has shape \(%d, 40, %d\)" % (H, K)):
        session.prefill(0, device_inputs[0].transpose(0, 1).contiguous(), *device_inputs[1:])
    torch.cuda.synchronize()
    assert session.tokens(0) == 41


def test_a_bad_device_input_is_reported_by_the_next_waiting_call(engines):
    cuda, _ = engines
    rng = np.random.default_rng(3)
    session = cuda.session()
    session.prefill(0, *random_inputs(rng, 4))  # host buffers: returns when done
    before = session.read_state(0)
    q, k, v, g, beta = on_device(random_inputs(rng, 1))
    k[0, 1, 7] = float("nan")
    out = torch.zeros((HV, V), device="cuda")
    session.step(0, q, k, v, g, beta, out=out)  # asynchronous: cannot report yet
    with pytest.raises(lumen.LumenError) as error:
        session.read_state(0)
    assert error.value.status == lumen.Status.INVALID_ARGUMENT
    assert "k at token 0, head 1, channel 7 is nan" in str(error.value)
    after = session.read_state(0)  # reported once; the state did not change
    assert np.array_equal(after, before)


def test_a_captured_step_batch_replays_like_direct_calls(engines):
    cuda, _ = engines
    rng = np.random.default_rng(4)
    n = 3
    warm = random_inputs(rng, 2)
    replayed = [cuda.session() for _ in range(n)]
    for session in replayed:
        session.prefill(0, *warm)
    direct = [session.fork() for session in replayed]

    inputs = on_device(random_inputs(rng, n))
    out = torch.zeros((n, HV, V), device="cuda")
    cuda.reserve(max_sessions=n, max_tokens=n)  # as a server readies itself to capture
    reserved = cuda.scratch_bytes
    assert reserved > 0
    graph = torch.cuda.CUDAGraph()
    capture_stream = torch.cuda.Stream()
    capture_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture_stream):
        with torch.cuda.graph(graph, stream=capture_stream):
            cuda.step_batch(0, replayed, *inputs, out=out, stream=capture_stream.cuda_stream)
    torch.cuda.synchronize()
    assert cuda.scratch_bytes == reserved  # the capture grew nothing

    expected = torch.empty_like(out)
    for _ in range(2):
        graph.replay()
        torch.cuda.synchronize()
        cuda.step_batch(0, direct, *inputs, out=expected)
        torch.cuda.synchronize()
        assert torch.equal(out, expected)
    for replayed_session, direct_session in zip(replayed, direct):
        assert np.array_equal(replayed_session.read_state(0), direct_session.read_state(0))


def test_a_cuda_snapshot_restores_bit_for_bit_on_the_cpu(engines):
    cuda, cpu = engines
    rng = np.random.default_rng(5)
    session = cuda.session()
    session.prefill(0, *on_device(random_inputs(rng, 70)),
                    out=torch.empty((70, HV, V), device="cuda"))
    data = session.snapshot()
    restored = cpu.session()
    restored.restore(data)
    assert np.array_equal(restored.read_state(0), session.read_state(0))
    assert restored.tokens(0) == session.tokens(0) == 70
    back = cuda.session()
    back.restore(restored.snapshot())
    assert np.array_equal(back.read_state(0), session.read_state(0))
