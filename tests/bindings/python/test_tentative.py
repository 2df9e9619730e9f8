"""Tentative tokens from Python: a tentative step then commit(m) is bitwise m plain steps,
one session and a batch; a session holding tentative tokens refuses other calls."""
import numpy as np
import pytest

import lumen
from layer_inputs import H, HV, K, V, random_inputs


def test_tentative_then_commit_equals_plain_steps(engine):
    rng = np.random.default_rng(28)
    n, m = 5, 3
    q, k, v, g, beta = random_inputs(rng, n)
    with engine.session() as tentative, engine.session() as plain:
        out = tentative.step_tentative(0, q, k, v, g=g, beta=beta)
        assert out.shape == (n, 4, 6)
        assert tentative.tentative_tokens == n and tentative.tokens(0) == 0
        stepped = np.stack([plain.step(0, q[t], k[t], v[t], g=g[t], beta=beta[t])
                            for t in range(n)])
        assert np.array_equal(out, stepped)  # bitwise
        with pytest.raises(lumen.LumenError) as error:
            tentative.step(0, q[0], k[0], v[0], g=g[0], beta=beta[0])
        assert error.value.status == lumen.Status.UNCOMMITTED_TOKENS
        with pytest.raises(lumen.LumenError):
            tentative.commit(n + 1)
        tentative.commit(m)
        assert tentative.tentative_tokens == 0 and tentative.tokens(0) == m
        with engine.session() as reference:
            for t in range(m):
                reference.step(0, q[t], k[t], v[t], g=g[t], beta=beta[t])
            assert np.array_equal(tentative.read_state(0), reference.read_state(0))


def test_rewind_goes_back_bitwise():
    rng = np.random.default_rng(30)
    q, k, v, g, beta = random_inputs(rng, 5)
    with lumen.ModelBuilder() as builder:  # one layer: every layer steps, so each keeps history
        builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV, key_dim=K,
                          value_dim=V)
        model = builder.build()
    with model, lumen.Engine(model, num_threads=2) as engine, engine.session() as session:
        session.set_rewind_depth(3)
        states = [session.read_state(0)]
        for t in range(5):
            session.step(0, q[t], k[t], v[t], g=g[t], beta=beta[t])
            states.append(session.read_state(0))
        assert session.rewind_available == 3
        session.rewind(2)
        assert session.tokens(0) == 3
        assert np.array_equal(session.read_state(0), states[3])
        with pytest.raises(lumen.LumenError):
            session.rewind(lumen.capi.LUMEN_MAX_REWIND_TOKENS)


def test_batched_tentative_tokens_commit_per_session(engine):
    rng = np.random.default_rng(29)
    counts, accepted = [2, 4], [2, 1]
    q, k, v, g, beta = random_inputs(rng, sum(counts))
    cu_seqlens = [0, counts[0], sum(counts)]
    sessions = [engine.session(), engine.session()]
    out = engine.step_tentative_batch(0, sessions, cu_seqlens, q, k, v, g=g, beta=beta)
    assert out.shape == (sum(counts), 4, 6)
    engine.commit_batch(sessions, accepted)
    for i, session in enumerate(sessions):
        assert session.tokens(0) == accepted[i]
        with engine.session() as reference:
            for t in range(cu_seqlens[i], cu_seqlens[i] + accepted[i]):
                reference.step(0, q[t], k[t], v[t], g=g[t], beta=beta[t])
            assert np.array_equal(session.read_state(0), reference.read_state(0))
        session.close()
    assert lumen.capi.LUMEN_MAX_TENTATIVE_TOKENS == 16
