"""Builds a two-layer model, prefills a prompt, steps, saves the session to a file, loads it
into a new session and checks that both continue with the same outputs.

Run: python3 examples/python/stream_snapshot.py [file], with the lumen wheel installed or
PYTHONPATH=<build>/bindings/python.
Needs only the standard library (arrays are array.array; numpy arrays work the same way).
"""
import array
import math
import sys

import lumen

H, K, V, PROMPT = 2, 4, 4, 8


def values(count, t, salt):
    return array.array("f", (math.sin(0.37 * i + 1.3 * t + salt) for i in range(count)))


def fill(count, value):
    return array.array("f", [value] * count)


def step(session, t):
    """One token through both layers (layer 0 gated, layer 1 retention); both outputs as
    fp32 bytes (the outputs are numpy arrays [HV, V] when numpy is there, flat arrays else)."""
    q, k, v = values(H * K, t, 0), values(H * K, t, 1), values(H * V, t, 2)
    o0 = session.step(0, q, k, v, g=fill(H, -0.1), beta=fill(H, 0.5))
    o1 = session.step(1, q, k, v)
    return bytes(o0) + bytes(o1)


def main(path):
    with lumen.ModelBuilder() as builder:
        # qk_l2norm: the delta rule wants unit-norm keys.
        builder.add_layer(family="gated_delta_net", num_heads=H, key_dim=K, value_dim=V,
                          qk_l2norm=True)
        builder.add_layer(family="retention", num_heads=H, key_dim=K, value_dim=V)
        model = builder.build()
    with model, lumen.Engine(model) as engine, engine.session() as session, \
            engine.session() as resumed:
        q, k = values(PROMPT * H * K, 100, 0), values(PROMPT * H * K, 100, 1)
        v = values(PROMPT * H * V, 100, 2)
        session.prefill(0, q, k, v, g=fill(PROMPT * H, -0.1), beta=fill(PROMPT * H, 0.5))
        session.prefill(1, q, k, v)
        o = array.array("f", step(session, 0))
        print("after the prompt and one step: o[0..%d] = %s"
              % (V - 1, " ".join("%.4f" % x for x in o[:V])))

        session.save(path)
        resumed.load(path)
        for t in range(1, 5):
            if step(session, t) != step(resumed, t):
                sys.exit("token %d: the loaded session differs" % t)
        print("saved to %s, loaded, and 4 more tokens match bit for bit" % path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "stream_snapshot.lumen")
