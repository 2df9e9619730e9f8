"""Arrays that carry a shape must have the call's shape; flat buffers are checked by count.

The case these tests guard against: flash-linear-attention's head-first layout [H, T, K]
(and [HV, V, K] V-first states) has the element count lumen expects, so without a shape check
it runs and gives wrong outputs.
"""
import array

import numpy as np
import pytest
import torch

import lumen
from layer_inputs import H, HV, K, V, random_inputs


def head_first(x):
    """fla's head-first copy of a [T, heads, ...] array: [heads, T, ...]."""
    return np.ascontiguousarray(np.swapaxes(x, 0, 1))


def shape_error(name, given, expected):
    """A pytest.raises for the ValueError that names the argument and both shapes."""
    return pytest.raises(ValueError, match=r"^%s has shape %s.*%s" % (
        name, re_shape(given), re_shape(expected)))


def re_shape(shape):
    return "\\" + str(tuple(shape)).replace(")", "\\)")


@pytest.mark.parametrize("argument", ["q", "k", "v", "g", "beta"])
def test_prefill_refuses_head_first_inputs(engine, argument):
    rng = np.random.default_rng(10)
    tokens = 5
    inputs = dict(zip(("q", "k", "v", "g", "beta"), random_inputs(rng, tokens)))
    expected = inputs[argument].shape
    inputs[argument] = head_first(inputs[argument])
    with engine.session() as session:
        with shape_error(argument, inputs[argument].shape, expected):
            session.prefill(0, **inputs)
        assert session.tokens(0) == 0


def test_head_first_is_refused_from_every_kind_of_array(engine):
    rng = np.random.default_rng(11)
    q, k, v, g, beta = random_inputs(rng, 3)
    wrong = head_first(q)  # [H, T, K] = (2, 3, 8) for [T, H, K] = (3, 2, 8)
    with engine.session() as session:
        for given in (wrong, memoryview(wrong), torch.from_numpy(wrong)):
            with shape_error("q", (H, 3, K), (3, H, K)):
                session.prefill(0, given, k, v, g=g, beta=beta)
        # A memoryview of raw bytes cast to a shape carries that shape too.
        cast = memoryview(wrong.tobytes()).cast("f", wrong.shape)
        with shape_error("q", (H, 3, K), (3, H, K)):
            session.prefill(0, cast, k, v, g=g, beta=beta)
        assert session.tokens(0) == 0


def test_flat_buffers_are_still_taken_by_their_count(engine):
    rng = np.random.default_rng(12)
    inputs = random_inputs(rng, 4)
    with engine.session() as shaped, engine.session() as flat, engine.session() as bare:
        expected = shaped.prefill(0, *inputs)
        np.testing.assert_array_equal(flat.prefill(0, *(x.ravel() for x in inputs)), expected)
        as_arrays = [array.array("f", x.tobytes()) for x in inputs]
        np.testing.assert_array_equal(bare.prefill(0, *as_arrays), expected)


def test_step_takes_one_token_with_or_without_a_leading_one(engine):
    rng = np.random.default_rng(13)
    q, k, v, g, beta = random_inputs(rng, 1)  # [1, H, K], ...
    with engine.session() as plain, engine.session() as leading:
        expected = plain.step(0, q[0], k[0], v[0], g=g[0], beta=beta[0])
        got = leading.step(0, q, k, v, g=g, beta=beta)
        assert got.shape == (HV, V)
        np.testing.assert_array_equal(got, expected)
        with shape_error("q", (K, H), (H, K)):
            plain.step(0, np.ascontiguousarray(q[0].T), k[0], v[0], g=g[0], beta=beta[0])
        with shape_error("v", (2, HV, V), (HV, V)):
            plain.step(0, q[0], k[0], np.concatenate([v, v]), g=g[0], beta=beta[0])
        with shape_error("g", (HV, 1), (HV,)):
            plain.step(0, q[0], k[0], v[0], g=g.T, beta=beta[0])
        assert plain.tokens(0) == 1


def test_outputs_the_caller_passes_are_checked_too(engine):
    rng = np.random.default_rng(14)
    q, k, v, g, beta = random_inputs(rng, 3)
    with engine.session() as session:
        with shape_error("out", (V, HV), (HV, V)):
            session.step(0, q[0], k[0], v[0], g=g[0], beta=beta[0],
                         out=np.empty((V, HV), np.float32))
        with shape_error("out", (HV, 3, V), (3, HV, V)):
            session.prefill(0, q, k, v, g=g, beta=beta, out=np.empty((HV, 3, V), np.float32))
        assert session.tokens(0) == 0
        one = np.empty((1, HV, V), np.float32)
        session.step(0, q[0], k[0], v[0], g=g[0], beta=beta[0], out=one)
        flat = np.empty(3 * HV * V, np.float32)
        session.prefill(0, q, k, v, g=g, beta=beta, out=flat)


def test_batched_calls_check_every_input(engine):
    rng = np.random.default_rng(15)
    n = 3
    q, k, v, g, beta = random_inputs(rng, n)
    sessions = [engine.session() for _ in range(n)]
    with shape_error("k", (H, n, K), (n, H, K)):
        engine.step_batch(0, sessions, q, head_first(k), v, g=g, beta=beta)
    with shape_error("out", (n, V, HV), (n, HV, V)):
        engine.step_batch(0, sessions, q, k, v, g=g, beta=beta,
                          out=np.empty((n, V, HV), np.float32))
    q, k, v, g, beta = random_inputs(rng, 5)
    with shape_error("beta", (HV, 5), (5, HV)):
        engine.prefill_varlen(0, sessions, [0, 2, 2, 5], q, k, v, g=g, beta=head_first(beta))
    with shape_error("q", (4, H, K), (5, H, K)):  # cu_seqlens says 5 tokens
        engine.prefill_varlen(0, sessions, [0, 2, 2, 5], q[:4], k, v, g=g, beta=beta)
    assert [s.tokens(0) for s in sessions] == [0, 0, 0]
    out = engine.prefill_varlen(0, sessions, [0, 2, 2, 5], q, k, v, g=g, beta=beta)
    assert out.shape == (5, HV, V)
    for session in sessions:
        session.close()


def test_a_vector_gate_is_per_key_channel():
    """gla and kda take g [T, HV, K]; a scalar gate's [T, HV] is refused by its shape."""
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gla", num_heads=H, key_dim=K, value_dim=V)
        model = builder.build()
    rng = np.random.default_rng(16)
    q, k, v, _, _ = random_inputs(rng, 4)
    v = np.ascontiguousarray(v[:, :H])  # HV = H
    g = -rng.uniform(0.01, 0.5, (4, H, K)).astype(np.float32)
    with model, lumen.Engine(model, num_threads=1) as engine, engine.session() as session:
        assert session.prefill(0, q, k, v, g=g).shape == (4, H, V)
        with shape_error("g", (4, H), (4, H, K)):
            session.prefill(0, q, k, v, g=np.ascontiguousarray(g[:, :, 0]))
        with shape_error("g", (H, K, 4), (4, H, K)):
            session.prefill(0, q, k, v, g=np.ascontiguousarray(g.transpose(1, 2, 0)))


def test_states_in_fla_order_are_refused(engine):
    """fla's layer caches hold a state V-first, [HV, V, K]; lumen's is [HV, K, V]."""
    rng = np.random.default_rng(17)
    with engine.session() as session:
        session.prefill(0, *random_inputs(rng, 3))
        state = session.read_state(0)
        assert state.shape == (HV, K, V)
        fla_order = np.ascontiguousarray(state.transpose(0, 2, 1))
        with shape_error("values", (HV, V, K), (HV, K, V)):
            session.write_state(0, fla_order)
        with shape_error("out", (HV, V, K), (HV, K, V)):
            session.read_state(0, out=np.empty((HV, V, K), np.float32))
        with shape_error("values", (HV, V, K), (HV, K, V)):
            session.write_state(0, torch.from_numpy(fla_order))
        fla_cache = torch.from_numpy(fla_order[None])  # [N, HV, V, K], N = 1
        session.write_state(0, fla_cache[0].transpose(-1, -2).contiguous())  # as the README
        np.testing.assert_array_equal(session.read_state(0), state)
        session.write_state(0, state.ravel())  # flat: by count
        np.testing.assert_array_equal(session.read_state(0), state)
