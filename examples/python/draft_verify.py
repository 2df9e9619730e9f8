"""Speculative decoding against one gated_delta_net layer: a draft proposes N tokens, the layer
runs them tentatively (every token's output, no state written), the caller accepts a prefix and
commits it, then steps the layer's own token where the draft was rejected. At the end the
session is checked, bit for bit, against one that stepped only the kept tokens."""
import sys

import numpy as np

import lumen

H, K, V, N, ROUNDS = 2, 4, 4, 4, 5


def draft(rng, tokens):
    """A stand-in for a small model's proposal: q, k, v, g, beta of `tokens` tokens."""
    q = rng.standard_normal((tokens, H, K)).astype(np.float32)
    k = rng.standard_normal((tokens, H, K)).astype(np.float32)
    v = rng.standard_normal((tokens, H, V)).astype(np.float32)
    g = np.full((tokens, H), -0.1, np.float32)
    beta = np.full((tokens, H), 0.5, np.float32)
    return q, k, v, g, beta


def main():
    rng = np.random.default_rng(0)
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=H, key_dim=K, value_dim=V,
                          qk_l2norm=1)
        model = builder.build()
    with model, lumen.Engine(model) as engine, engine.session() as session, \
            engine.session() as plain:
        for round_ in range(ROUNDS):
            q, k, v, g, beta = draft(rng, N)
            o = session.step_tentative(0, q, k, v, g=g, beta=beta)  # verify all N at once
            # Accept while the layer agrees with the draft (here: o[t, 0, 0] is positive).
            accepted = 0
            while accepted < N and o[accepted, 0, 0] > 0:
                accepted += 1
            session.commit(accepted)
            kept = [(q[t], k[t], v[t], g[t], beta[t]) for t in range(accepted)]
            if accepted < N:  # the layer's own token replaces the rejected draft token
                own = tuple(x[0] for x in draft(rng, 1))
                session.step(0, *own[:3], g=own[3], beta=own[4])
                kept.append(own)
            for qt, kt, vt, gt, bt in kept:  # the reference: plain steps of the kept tokens
                plain.step(0, qt, kt, vt, g=gt, beta=bt)
            print("round %d: accepted %d of %d draft tokens" % (round_, accepted, N))
        same = np.array_equal(session.read_state(0), plain.read_state(0))
        print("%d tokens consumed; state %s plain steps bit for bit"
              % (session.tokens(0), "equals" if same else "DIFFERS FROM"))
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
