"""An agent service: many conversations, each resumed by key from Redis in whichever worker
process handles its next turn, with each worker's memory bounded by its engine's budget.

Every turn of every conversation goes to a random worker. A worker that served the
conversation before runs the turn on the session it kept (in memory, or spilled by its
engine); one that did not loads it from Redis by key (a new conversation starts empty).
Either way it saves the session back with compare-and-set on the version it started from:
if another worker saved the conversation in between, the save fails with
VERSION_CONFLICT, and the worker loads the newer state and runs the turn again, so no turn
is lost and none is applied twice. The engine keeps at most --budget sessions resident and
spills the rest to its spill directory.

At the end the example checks every conversation: its token count is its turns times the
tokens per turn, and its state equals, bit for bit, the same turns run in one session here.

    python3 agent_service.py [--redis redis://127.0.0.1:6379/0] [--conversations 24]
                             [--turns 4] [--workers 3] [--budget 4]

Without --redis it starts a private redis-server on a free loopback port (and stops it).
"""
import argparse
import multiprocessing
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import lumen

H, HV, K, V = 2, 4, 16, 16   # a small gated DeltaNet, so that the example runs in seconds
LAYERS = 2
TOKENS_PER_TURN = 3


def build_model():
    with lumen.ModelBuilder() as builder:
        for _ in range(LAYERS):
            builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV,
                              key_dim=K, value_dim=V, qk_l2norm=True)
        return builder.build()


def turn_inputs(conversation, turn):
    """The turn's tokens: the same wherever the turn runs (a user's message, in effect)."""
    rng = np.random.default_rng(1000 * conversation + turn)
    q = rng.standard_normal((TOKENS_PER_TURN, H, K), dtype=np.float32)
    k = rng.standard_normal((TOKENS_PER_TURN, H, K), dtype=np.float32)
    v = rng.standard_normal((TOKENS_PER_TURN, HV, V), dtype=np.float32)
    g = -rng.uniform(0.01, 0.3, (TOKENS_PER_TURN, HV)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (TOKENS_PER_TURN, HV)).astype(np.float32)
    return q, k, v, g, beta


def run_turn(session, conversation, turn):
    q, k, v, g, beta = turn_inputs(conversation, turn)
    for layer in range(LAYERS):
        session.prefill(layer, q, k, v, g=g, beta=beta)


def worker(uri, budget, jobs, results):
    """Serves turns from `jobs` until it reads None."""
    model = build_model()
    with model, lumen.Engine(model, backend="cpu", num_threads=1,
                             memory_budget_bytes=budget * model.state_bytes()) as engine, \
            lumen.Store(uri) as store:
        cached = {}  # conversation -> (session, the version it holds)
        conflicts = 0
        for job in iter(jobs.get, None):
            conversation, turn = job
            key = "conversation:%d" % conversation
            session, version = cached.get(conversation, (None, None))
            if session is None:
                session = engine.session()
            while True:
                if version is None:  # not served here, or saved elsewhere since: load it
                    try:
                        version = store.load(key, session)
                    except lumen.LumenError as error:
                        if error.status != lumen.Status.NOT_FOUND:
                            raise
                        session.reset()
                        version = 0  # a new conversation: save only if still absent
                run_turn(session, conversation, turn)
                try:
                    version = store.save(key, session, expected_version=version)
                    break
                except lumen.LumenError as error:
                    if error.status != lumen.Status.VERSION_CONFLICT:
                        raise
                    conflicts += 1  # another worker saved it since: load its state, redo
                    version = None
            cached[conversation] = (session, version)
            results.put(("turn", conversation, turn))
        stats = engine.stats()
        results.put(("stats", stats, conflicts))
        for session, _ in cached.values():
            session.close()


def start_private_redis():
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server not found: install it or pass --redis URI")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    directory = tempfile.mkdtemp(prefix="lumen-agent-redis-")
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                                directory, "--save", "", "--appendonly", "no"],
                               stdout=subprocess.DEVNULL)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.01)
    return "redis://127.0.0.1:%d/0" % port, process, directory


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4, help="resident sessions per worker")
    args = parser.parse_args()

    process = directory = None
    uri = args.redis
    if uri is None:
        uri, process, directory = start_private_redis()
    try:
        context = multiprocessing.get_context("spawn")
        queues = [context.Queue() for _ in range(args.workers)]
        results = context.Queue()
        workers = [context.Process(target=worker, args=(uri, args.budget, q, results))
                   for q in queues]
        for w in workers:
            w.start()
        # Turn t of every conversation goes out once turn t - 1 of it is done, each to a
        # random worker: conversations hop between processes.
        rng = random.Random(29)
        for turn in range(args.turns):
            for conversation in range(args.conversations):
                rng.choice(queues).put((conversation, turn))
            for _ in range(args.conversations):
                kind, *_ = results.get(timeout=120)
                assert kind == "turn"
        for q in queues:
            q.put(None)
        total_conflicts = 0
        for _ in workers:
            kind, stats, conflicts = results.get(timeout=120)
            total_conflicts += conflicts
            print("worker: %d resident (%d bytes, budget %d), %d spilled, %d evictions, "
                  "%d reloads" % (stats["resident_sessions"], stats["resident_bytes"],
                                  stats["memory_budget_bytes"], stats["spilled_sessions"],
                                  stats["evictions"], stats["reloads"]))
            assert stats["resident_bytes"] <= stats["memory_budget_bytes"]
        for w in workers:
            w.join()
            assert w.exitcode == 0

        # Every conversation, as stored, equals its turns run in one session here.
        model = build_model()
        with model, lumen.Engine(model, backend="cpu", num_threads=1) as engine, \
                lumen.Store(uri) as store:
            for conversation in range(args.conversations):
                with engine.session() as stored, engine.session() as here:
                    version = store.load("conversation:%d" % conversation, stored)
                    for turn in range(args.turns):
                        run_turn(here, conversation, turn)
                    assert version == args.turns
                    for layer in range(LAYERS):
                        assert stored.tokens(layer) == args.turns * TOKENS_PER_TURN
                        assert np.array_equal(stored.read_state(layer), here.read_state(layer))
        print("%d conversations x %d turns over %d workers: every state bit for bit "
              "(%d compare-and-set retries)" % (args.conversations, args.turns, args.workers,
                                                total_conflicts))
    finally:
        if process is not None:
            process.kill()
            process.wait()
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
