"""The engine most tests use: layer 0 gated_delta_net (H, HV, K, V of layer_inputs), layer 1
retention (HV = H)."""
import pytest

import lumen
from layer_inputs import H, HV, K, V


@pytest.fixture
def engine():
    with lumen.ModelBuilder() as builder:
        builder.add_layer(family="gated_delta_net", num_heads=H, num_value_heads=HV, key_dim=K,
                          value_dim=V)
        builder.add_layer(family=lumen.Family.RETENTION, num_heads=H, key_dim=K, value_dim=V)
        model = builder.build()
    with model, lumen.Engine(model, num_threads=2) as engine:
        yield engine
