"""Session stores and the engine's memory budget through the Python binding: a file store
and (where redis-server is installed) a private Redis server, versions and compare-and-set,
the statuses of a missing key and a lost race; a budgeted engine evicting, reloading and
prefetching sessions, and its statistics."""
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import lumen
from layer_inputs import H, HV, K, V


def _state(session):
    return [session.read_state(layer) for layer in range(session.engine.model.num_layers)]


def _advance(session, seed):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        q = rng.standard_normal((1, H, K), dtype=np.float32)
        k = rng.standard_normal((1, H, K), dtype=np.float32)
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        v = rng.standard_normal((1, HV, V), dtype=np.float32)
        g = -rng.uniform(0.01, 0.3, (1, HV)).astype(np.float32)
        beta = rng.uniform(0.1, 0.9, (1, HV)).astype(np.float32)
        session.step(0, q, k, v, g=g, beta=beta)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_uri():
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (Debian: redis-server)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1",
                                    "--dir", directory, "--save", "", "--appendonly", "no"],
                                   stdout=subprocess.DEVNULL)
        try:
            for _ in range(500):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    time.sleep(0.01)
            yield "redis://127.0.0.1:%d/0" % port
        finally:
            process.kill()
            process.wait()


@pytest.fixture(params=["file", "redis"])
def store_uri(request, tmp_path):
    if request.param == "file":
        return "file://%s" % tmp_path
    return request.getfixturevalue("redis_uri")


def test_store_round_trip_versions_and_conflicts(engine, store_uri):
    with lumen.Store(store_uri, part_bytes=4096) as store, engine.session() as a, \
            engine.session() as b:
        _advance(a, 1)
        assert store.save("chat/1", a) == 1
        assert store.save("chat/1", a, expected_version=1) == 2
        assert store.load("chat/1", b) == 2
        for x, y in zip(_state(a), _state(b)):
            assert np.array_equal(x, y)
        with pytest.raises(lumen.LumenError) as error:
            store.save("chat/1", b, expected_version=1)
        assert error.value.status == lumen.Status.VERSION_CONFLICT
        assert "holds version 2" in error.value.message
        with pytest.raises(lumen.LumenError) as error:
            store.load("nobody", b)
        assert error.value.status == lumen.Status.NOT_FOUND
        store.remove("chat/1")
        with pytest.raises(lumen.LumenError) as error:
            store.remove("chat/1")
        assert error.value.status == lumen.Status.NOT_FOUND


def test_unreachable_redis_has_its_own_status():
    with pytest.raises(lumen.LumenError) as error:
        lumen.Store("redis://127.0.0.1:%d/0" % _free_port(), timeout_ms=500)
    assert error.value.status in (lumen.Status.UNAVAILABLE, lumen.Status.UNSUPPORTED)


def test_memory_budget_evicts_reloads_and_prefetches(tmp_path):
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV, key_dim=K,
                          value_dim=V)
        model = builder.build()
    budget = 2 * model.state_bytes()
    with model, lumen.Engine(model, backend="cpu", num_threads=1, memory_budget_bytes=budget,
                             spill_directory=str(tmp_path)) as engine:
        sessions = [engine.session() for _ in range(4)]
        states = []
        for i, session in enumerate(sessions):
            _advance(session, 10 + i)
            states.append(_state(session))
        stats = engine.stats()
        assert stats["memory_budget_bytes"] == budget
        assert stats["resident_sessions"] == 2 and stats["spilled_sessions"] == 2
        assert not sessions[0].resident
        sessions[0].prefetch()
        for _ in range(500):
            if sessions[0].resident:
                break
            time.sleep(0.01)
        assert sessions[0].resident
        for session, state in zip(sessions, states):
            for x, y in zip(state, _state(session)):
                assert np.array_equal(x, y)
        stats = engine.stats()
        assert stats["prefetches"] == 1 and stats["reloads"] >= 1
        assert stats["resident_bytes"] <= budget
        for session in sessions:
            session.close()
