"""The dims and random inputs the Python tests share: one gated_delta_net layer with grouped
value heads (HV = 2 H) and K != V, so that a transposed state or a swapped axis shows."""
import numpy as np

H, HV, K, V = 2, 4, 8, 6


def random_inputs(rng, tokens):
    """q, k, v, g, beta for `tokens` tokens in lumen's layout ([T, H, K], [T, HV, V], [T, HV])."""
    q = rng.standard_normal((tokens, H, K)).astype(np.float32)
    k = rng.standard_normal((tokens, H, K))
    k = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)  # unit-norm keys
    v = rng.standard_normal((tokens, HV, V)).astype(np.float32)
    g = -rng.uniform(0.01, 0.5, (tokens, HV)).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (tokens, HV)).astype(np.float32)
    return q, k, v, g, beta
